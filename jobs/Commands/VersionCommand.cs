using System.Text.Json;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Cli;
using Hpc.CommonData.Hosting;
using Hpc.Jobs.Cli;

namespace Hpc.Jobs.Commands;

public sealed class VersionOptions : CacheClientOptions, IVerbOptions
{
    public static string Verb => "version";

    public static string Summary => "This hpcdata's version, and the version of this node's agent and of each cache host, with a warning where they differ.";

    protected override IReadOnlyCollection<string> AgentSwitchNames => AgentSwitches.Pipe;

    [Switch("--json", "One JSON document on stdout: client, agent (pipe, version or error) and hosts (host, server or error).")]
    public bool Json { get; set; }
}

/// <summary>
/// What runs where, as kubectl version and redis-cli INFO server say it: the client, the node's agent, each cache host.
/// A part that does not answer is a line saying why, not a failure: exit 0 unless the command line was wrong.
/// </summary>
public static class VersionCommand
{
    public static async Task<int> RunAsync(VersionOptions o, CancellationToken ct)
    {
        var client = CommandTree.Version;
        var pipe = o.Agent.PipeName;
        var answer = await o.Agent.QueryStatusAsync(ct);
        var agent = answer.Status is { } status ? status.Version ?? "(older than 1.0: does not say)" : null;
        var agentError = answer.Failure is { } failure ? o.Agent.Problem(failure) : null;

        var options = o.CacheTier();
        // One quick attempt per host: a version that waits out retries on a dead host is no quick answer.
        options.MaxAttempts = 1;
        options.ConnectionsPerHost = 1;
        options.OperationTimeout = TimeSpan.FromSeconds(3);
        CacheHostStatus[] hosts;
        await using (var tier = new CacheTierClient(options, o.TierLog))
            hosts = await tier.GetHostStatusAsync(ct);

        if (o.Json)
        {
            using var json = new Utf8JsonWriter(Console.OpenStandardOutput(), new JsonWriterOptions { Indented = false });
            json.WriteStartObject();
            json.WriteString("client", client);
            json.WriteStartObject("agent");
            json.WriteString("pipe", pipe);
            if (agent is not null) json.WriteString("version", agent);
            if (agentError is not null) json.WriteString("error", agentError);
            json.WriteEndObject();
            json.WriteStartArray("hosts");
            foreach (var h in hosts)
            {
                json.WriteStartObject();
                json.WriteString("host", h.Host);
                if (h.Server is not null) json.WriteString("server", h.Server);
                if (h.Error is not null) json.WriteString("error", h.Error);
                json.WriteEndObject();
            }
            json.WriteEndArray();
            json.WriteEndObject();
            json.Flush();
            Console.Out.WriteLine();
            return ExitCodes.Ok;
        }

        var table = new TextTable("PART", "WHERE", "VERSION");
        // On the runtime (a build's output, an installed tool's assembly run by its launcher) the program is the assembly,
        // not the host or the launcher; compiled to native code it is this executable.
        var self = !System.Runtime.CompilerServices.RuntimeFeature.IsDynamicCodeSupported && Environment.ProcessPath is { } process
            ? process : Path.Combine(AppContext.BaseDirectory, "hpcdata.dll");
        table.Add("hpcdata", self, $"{client} ({ComponentLocator.BuildKind(self)})");
        table.Add("agent", pipe, agent ?? "not answering");
        foreach (var h in hosts) table.Add("cache host", h.Host, h.Server ?? "unreachable");
        table.WriteTo(Console.Out);
        if (agentError is not null) Console.Error.WriteLine($"hpcdata version: agent: {agentError}");
        foreach (var h in hosts.Where(h => h.Error is not null)) Console.Error.WriteLine($"hpcdata version: {h.Host}: {h.Error}");
        // Same release on every part is what was tested together; a mixed one works (the protocols are versioned) but is
        // where to look first when something misbehaves.
        if (agent is not null && agent != client) Console.Error.WriteLine($"hpcdata version: warning: the agent runs {agent}, this hpcdata is {client}");
        foreach (var h in hosts.Where(h => h.Server is { } s && s.StartsWith("hpc-cachehost ", StringComparison.Ordinal) && s["hpc-cachehost ".Length..] != client))
            Console.Error.WriteLine($"hpcdata version: warning: {h.Host} runs {h.Server!["hpc-".Length..]}, this hpcdata is {client}");
        return ExitCodes.Ok;
    }
}
