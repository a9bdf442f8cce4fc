using System.Text.Json;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Cli;
using Hpc.CommonData.Hosting;
using Hpc.CommonData.Security;
using Hpc.Jobs.Cli;

namespace Hpc.Jobs.Commands;

public sealed class DoctorOptions : CacheClientOptions, IVerbOptions
{
    public static string Verb => "doctor";

    public static string Summary => "Check what this machine needs to use the cache tier and this node's agent — settings, each cache host, the account, TLS, the agent and its data directory — each with what to fix.";

    public static IReadOnlyList<(string Command, string What)> Examples =>
    [
        ("hpcdata doctor",
         "check the cache hosts, credentials, TLS, this node's agent and its data directory"),
    ];

    protected override IReadOnlyCollection<string> AgentSwitchNames => AgentSwitches.Pipe;

    [Switch("--json", "One JSON array on stdout: each check's name, result (ok, warn, fail), what was found and what to do.")]
    public bool Json { get; set; }

    [Switch("--no-agent", "This machine runs no agent (a login or staging host): do not check one.")]
    public bool NoAgent { get; set; }
}

/// <summary>
/// What an operator asks first when a job cannot get its data: is the tier named, does each host answer, does it take
/// this account, does TLS verify, does the node's agent answer and has it room. Each check is one row with what was
/// found and, where it is not well, what to do. Exit 0 when nothing failed (warnings included), else the first
/// failure's kind (69 a host or the agent unreachable, 77 an account refused, 2 the settings themselves).
/// </summary>
public static class DoctorCommand
{
    public enum Result { Ok, Warn, Fail }

    public sealed record Check(string Name, Result Result, string Found, string? Fix = null, ErrorCode? Kind = null);

    public static async Task<int> RunAsync(DoctorOptions o, CancellationToken ct)
    {
        var checks = new List<Check>();
        var config = ClientConfig.Load();
        checks.Add(config.Files.Count > 0
            ? new Check("settings", Result.Ok, $"client settings from {string.Join(", ", config.Files)}")
            : new Check("settings", Result.Ok, $"no client settings file ({string.Join(", ", ClientConfig.Candidates(Environment.GetEnvironmentVariable))}): switches and variables only"));

        var given = o.CacheHosts; // as given: CacheTier() resolves the default apart
        CacheTierOptions tier;
        try { tier = o.CacheTier(); }
        catch (Exception e) when (e is ArgumentException or IOException or UnauthorizedAccessException)
        {
            checks.Add(new Check("cache tier settings", Result.Fail, e.Message, "correct the setting it names", ErrorCode.BadRequest));
            return Report(o, checks);
        }
        checks.Add(given is null
            ? new Check("cache hosts", Result.Warn, $"none given: {string.Join(",", tier.Hosts)} is only the default",
                $"name the site's hosts once: cache-hosts = HOST:PORT,… in {ClientConfig.SiteFile} (or {CacheTierOptions.HostsVariable}, --cache-hosts)")
            : new Check("cache hosts", Result.Ok, $"{string.Join(",", tier.Hosts)} (from {o.Origins["--cache-hosts"]})"));
        if (!string.IsNullOrEmpty(tier.PasswordFile))
            checks.Add(SecretFiles.Exposure((tier.PasswordFile, "--cache-password-file")) is { } exposed
                ? new Check("password file", Result.Warn, exposed, $"chmod 600 {tier.PasswordFile}")
                : new Check("password file", Result.Ok, $"{tier.PasswordFile}, readable by its owner alone (from {o.Origins["--cache-password-file"]})"));

        await CheckHostsAsync(tier, checks, o.TierLog, ct);
        if (!o.NoAgent) await CheckAgentAsync(o, checks, ct);
        return Report(o, checks);
    }

    private static async Task CheckHostsAsync(CacheTierOptions options, List<Check> checks, Microsoft.Extensions.Logging.ILogger log, CancellationToken ct)
    {
        // One quick attempt per host: a health check that waits out retries on a dead host is no quick answer.
        options.MaxAttempts = 1;
        options.ConnectionsPerHost = 1;
        options.OperationTimeout = TimeSpan.FromSeconds(3);
        await using var client = new CacheTierClient(options, log);
        var hosts = await client.GetHostStatusAsync(ct);
        var answered = -1;
        for (var i = 0; i < hosts.Length; i++)
        {
            var h = hosts[i];
            if (h.Error is null)
            {
                checks.Add(new Check($"cache host {h.Host}", Result.Ok, $"{h.Server ?? "a server that does not say its version"}{(options.Tls ? ", TLS verified" : "")}"));
                if (answered < 0) answered = i;
                continue;
            }
            var (fix, kind) = HostFix(h.Error, h.Host, options);
            checks.Add(new Check($"cache host {h.Host}", Result.Fail, h.Error, fix, kind));
        }
        if (answered < 0) return;
        // What this account may do, asked without doing it: staging needs SET, reading needs GET.
        try
        {
            var who = await client.ExecuteOnAsync(answered, "ACL"u8.ToArray(), ["WHOAMI"], ct);
            var user = who.Kind == RespKind.Bulk ? System.Text.Encoding.UTF8.GetString(who.Bulk!) : who.Kind == RespKind.SimpleString ? who.Text : null;
            var stage = await client.DryRunAsync(answered, ["SET", "hpc:doctor", "x"], ct);
            var read = await client.DryRunAsync(answered, ["GET", "hpc:doctor"], ct);
            var account = user is null ? "an open host (no accounts)" : $"account '{user}'";
            checks.Add(read is not null
                ? new Check("account", Result.Fail, $"{account} may not read: {read}", "use a reader's or writer's account (cache-user, cache-password-file)", ErrorCode.AccessDenied)
                : new Check("account", Result.Ok, stage is null ? $"{account}: may read and stage" : $"{account}: may read, not stage (a reader)"));
        }
        catch (Exception e) when (e is CacheHostUnavailableException or CommonDataException or IOException)
        {
            checks.Add(new Check("account", Result.Warn, $"could not be asked: {e.Message}"));
        }
    }

    /// <summary>What to do about a host that did not answer, from what went wrong.</summary>
    private static (string Fix, ErrorCode Kind) HostFix(string error, string host, CacheTierOptions options)
    {
        var e = error.ToLowerInvariant();
        var port = host[(host.LastIndexOf(':') + 1)..];
        if (e.Contains("wrongpass") || e.Contains("noauth") || e.Contains("invalid username-password") || e.Contains("authentication"))
            return ("check cache-user and the password in cache-password-file against the host's --users-file or --password", ErrorCode.AccessDenied);
        if (e.Contains("certificate") || e.Contains("ssl") || e.Contains("tls"))
            return (options.TlsCaFile is null
                ? "give the CA that signed the host's certificate: cache-ca = /etc/hpcdata/tls/ca.pem (--cache-ca, HPCDATA_CACHE_CA)"
                : $"the host's certificate is not signed by {options.TlsCaFile}, or does not name {host[..host.LastIndexOf(':')]}: check both", ErrorCode.Unavailable);
        if (e.Contains("refused"))
            return ($"nothing listens on port {port} there: start the cache host (hpcdata cache-host --port {port}, or its service) or correct cache-hosts", ErrorCode.Unavailable);
        if (e.Contains("name") && (e.Contains("resolv") || e.Contains("known") || e.Contains("found")))
            return ("the name does not resolve: check the host name in cache-hosts", ErrorCode.Unavailable);
        return ("the host took no connection or gave no answer: a firewall dropping the port, or a host that is down or hung", ErrorCode.Unavailable);
    }

    private static async Task CheckAgentAsync(DoctorOptions o, List<Check> checks, CancellationToken ct)
    {
        var pipe = o.Agent.PipeName;
        var answer = await o.Agent.QueryStatusAsync(ct);
        if (answer.Failure is { } failure)
        {
            checks.Add(answer.Refused
                ? new Check("agent", Result.Fail, $"refused: {failure.Message}", "check who runs the agent and its --admin-group", ErrorCode.AccessDenied)
                : new Check("agent", Result.Fail, AgentClient.NotAnswering(pipe, failure),
                    $"start it (hpcdata agent{(o.Agent.IsSet("--pipe") ? $" --pipe {pipe}" : "")}, or the node's hpcdata-agent service); on a host without one, --no-agent", ErrorCode.Unavailable));
            return;
        }
        var status = answer.Status!;
        var version = status.Version ?? "(does not say its version)";
        checks.Add(version == CommandTree.Version
            ? new Check("agent", Result.Ok, $"{version} on pipe '{pipe}', node {status.Node}")
            : new Check("agent", Result.Warn, $"{version} on pipe '{pipe}', this hpcdata is {CommandTree.Version}", "install one release on the node and restart the agent"));

        var dir = status.DataDirectory;
        long? free = null;
        try { free = new DriveInfo(dir).AvailableFreeSpace; }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or ArgumentException) { }
        var budget = new ByteSize(status.BudgetBytes);
        var used = new ByteSize(status.UsedBytes);
        var found = $"{dir}: {used} of its {budget} budget used, {status.Copies.Count} copies{(free is { } f ? $", {new ByteSize(f)} free on its file system" : "")}";
        checks.Add(free is { } room && room < status.BudgetBytes - status.UsedBytes
            ? new Check("data directory", Result.Warn, found, "the budget's unused part does not fit on the file system: lower --budget, free space, or move --data-dir")
            : new Check("data directory", Result.Ok, found));
    }

    private static int Report(DoctorOptions o, List<Check> checks)
    {
        if (o.Json)
        {
            using var json = new Utf8JsonWriter(Console.OpenStandardOutput());
            json.WriteStartArray();
            foreach (var c in checks)
            {
                json.WriteStartObject();
                json.WriteString("check", c.Name);
                json.WriteString("result", c.Result.ToString().ToLowerInvariant());
                json.WriteString("found", c.Found);
                if (c.Fix is not null) json.WriteString("fix", c.Fix);
                json.WriteEndObject();
            }
            json.WriteEndArray();
            json.Flush();
            Console.Out.WriteLine();
        }
        else
        {
            var table = new TextTable("CHECK", "RESULT", "FOUND");
            foreach (var c in checks) table.Add(c.Name, c.Result.ToString().ToLowerInvariant(), c.Found);
            table.WriteTo(Console.Out);
            foreach (var c in checks.Where(c => c.Fix is not null))
                Console.Error.WriteLine($"hpcdata doctor: {c.Name}: {c.Fix}");
        }
        return checks.FirstOrDefault(c => c.Result == Result.Fail) is { } failed ? ExitCodes.For(failed.Kind ?? ErrorCode.Internal) : ExitCodes.Ok;
    }
}
