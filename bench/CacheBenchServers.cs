using Hpc.CommonData.Security;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Text.RegularExpressions;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;

namespace Hpc.Bench;

/// <summary>A program found (or not) for <c>bench cache</c>; <see cref="Missing"/> says why it was not, in one line.</summary>
public sealed record ToolLookup(string Name, string? Path, string? Missing);

/// <summary>Where <c>bench cache</c> finds the programs it does not build itself.</summary>
public static class CacheBenchTools
{
    public const string GarnetVariable = "HPCDATA_GARNET";

    public static ToolLookup RedisServer() => OnPath("redis-server", "install redis-server (apt-get install redis-server)");

    public static ToolLookup RedisBenchmark() => OnPath("redis-benchmark", "install redis-tools (apt-get install redis-tools)");

    /// <summary>
    /// $HPCDATA_GARNET, else PATH, else ~/.dotnet/tools, else /opt/hpcdata-tools. A variable that is set but wrong is
    /// reported rather than silently replaced by another copy, so a run measures the garnet its user named.
    /// </summary>
    public static ToolLookup Garnet()
    {
        const string name = "garnet-server";
        if (Environment.GetEnvironmentVariable(GarnetVariable) is { Length: > 0 } set)
            return File.Exists(set) ? new(name, set, null) : new(name, null, $"{GarnetVariable}={set} is not a file");
        var found = FindOnPath(name);
        if (found is not null) return new(name, found, null);
        var home = Environment.GetFolderPath(Environment.SpecialFolder.UserProfile);
        foreach (var candidate in new[] { Path.Combine(home, ".dotnet", "tools", name), Path.Combine("/opt", "hpcdata-tools", name) })
            if (File.Exists(candidate)) return new(name, candidate, null);
        return new(name, null, $"not on PATH, in ~/.dotnet/tools or /opt/hpcdata-tools, and {GarnetVariable} is not set");
    }

    private static ToolLookup OnPath(string name, string hint) =>
        FindOnPath(name) is { } path ? new(name, path, null) : new(name, null, $"not on PATH ({hint})");

    private static string? FindOnPath(string name) =>
        (Environment.GetEnvironmentVariable("PATH") ?? "").Split(Path.PathSeparator, StringSplitOptions.RemoveEmptyEntries)
            .Select(d => Path.Combine(d, name)).FirstOrDefault(File.Exists);

    /// <summary>First line of <c>program --version</c> matched by <paramref name="pattern"/> (group 1), or null.</summary>
    public static string? Version(string program, string pattern)
    {
        try
        {
            var r = Shell.Run(program, "--version");
            var m = Regex.Match(r.Stdout + r.Stderr, pattern);
            return m.Success ? m.Groups[1].Value : null;
        }
        catch (Exception e) when (e is InvalidOperationException or TimeoutException or System.ComponentModel.Win32Exception) { return null; }
    }
}

/// <summary>
/// A program that is not one of ours (redis-server, garnet-server, redis-benchmark), with its output kept in bounded
/// tails for error messages. Disposal kills it with its children: the stores hold nothing worth a clean shutdown.
/// </summary>
public sealed class ExternalProcess : IAsyncDisposable
{
    private readonly Process _process;
    private readonly ConcurrentQueue<string> _stdout = new();
    private readonly ConcurrentQueue<string> _stderr = new();

    public string Name { get; }
    public int Id => _process.Id;
    public bool HasExited => _process.HasExited;
    public IReadOnlyCollection<string> StandardOutput => _stdout;
    public string Tail => string.Join(Environment.NewLine, _stdout.TakeLast(20).Concat(_stderr.TakeLast(20)));

    private ExternalProcess(string name, Process process)
    {
        Name = name;
        _process = process;
    }

    public static ExternalProcess Start(string name, string program, IEnumerable<string> args)
    {
        var info = new ProcessStartInfo(program) { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        foreach (var a in args) info.ArgumentList.Add(a);
        var p = new ExternalProcess(name, new Process { StartInfo = info });
        p._process.OutputDataReceived += (_, e) => { if (e.Data is not null) Bounded(p._stdout, e.Data); };
        p._process.ErrorDataReceived += (_, e) => { if (e.Data is not null) Bounded(p._stderr, e.Data); };
        p._process.Start();
        p._process.BeginOutputReadLine();
        p._process.BeginErrorReadLine();
        return p;
    }

    private static void Bounded(ConcurrentQueue<string> q, string line)
    {
        q.Enqueue(line);
        while (q.Count > 2000) q.TryDequeue(out _);
    }

    /// <summary>The exit code; on timeout or cancellation the process is killed and the exception propagates.</summary>
    public async Task<int> WaitForExitAsync(TimeSpan timeout, CancellationToken ct)
    {
        try
        {
            await _process.WaitForExitAsync(ct).WaitAsync(timeout, ct);
        }
        catch (TimeoutException)
        {
            await KillAsync();
            throw new TimeoutException($"{Name} did not finish in {timeout.TotalSeconds:0} s");
        }
        _process.WaitForExit(); // drains the redirected streams
        return _process.ExitCode;
    }

    private async Task KillAsync()
    {
        try { _process.Kill(entireProcessTree: true); } catch (InvalidOperationException) { }
        try { await _process.WaitForExitAsync().WaitAsync(TimeSpan.FromSeconds(10)); } catch (TimeoutException) { }
    }

    public async ValueTask DisposeAsync()
    {
        await KillAsync();
        _process.Dispose();
    }
}

/// <summary>One store under test, on its own loopback port, stopped on dispose.</summary>
public sealed class CacheBenchServer : IAsyncDisposable
{
    public const string CacheHost = CacheResults.CacheHost, Redis = CacheResults.Redis, Garnet = CacheResults.Garnet;
    private static readonly TimeSpan ReadyTimeout = TimeSpan.FromSeconds(60);

    private readonly ComponentProcess? _component;
    private readonly ExternalProcess? _external;
    private readonly string? _scratch;

    public string Name { get; }
    public string? Version { get; }
    public CacheEndpoint Endpoint { get; }

    /// <summary>Set when the store serves TLS: how clients verify it, and the CA file for redis-benchmark.</summary>
    public CacheTls? Tls { get; private init; }
    public string? CaFile { get; private init; }

    /// <summary>The suffix of a store's name when it is measured over TLS.</summary>
    public const string TlsSuffix = CacheResults.TlsSuffix;
    public int Pid => _component?.Id ?? _external!.Id;

    private CacheBenchServer(string name, string? version, CacheEndpoint endpoint, ComponentProcess? component, ExternalProcess? external, string? scratch)
    {
        Name = name; Version = version; Endpoint = endpoint;
        _component = component; _external = external; _scratch = scratch;
    }

    /// <summary>Our cache host picks its own free port and says which on its READY line.</summary>
    public static async Task<CacheBenchServer> StartCacheHostAsync(CancellationToken ct, SiteCertificates? tls = null)
    {
        var p = ComponentProcess.Start(new CacheHostOptions
        {
            Address = "127.0.0.1", Port = 0, MaxMemoryBytes = 2L << 30, TlsCertificateFile = tls?.CertificateFile, TlsKeyFile = tls?.KeyFile,
        }, name: CacheHost);
        try
        {
            var ready = await p.WaitReadyAsync(ReadyTimeout, ct);
            return new CacheBenchServer(CacheHost + (tls is null ? "" : TlsSuffix), null, CacheEndpoint.Parse(ready), p, null, null)
            {
                Tls = tls is null ? null : CacheTls.Create(tls.CaFile), CaFile = tls?.CaFile,
            };
        }
        catch
        {
            await p.DisposeAsync();
            throw;
        }
    }

    /// <summary>No persistence: --save '' and no AOF, and its working directory is a scratch one removed on dispose.</summary>
    public static Task<CacheBenchServer> StartRedisAsync(string program, CancellationToken ct, SiteCertificates? tls = null, long maxMemoryBytes = 2L << 30)
    {
        var version = CacheBenchTools.Version(program, @"v=([0-9][^ ]*)");
        string[] Listen(string port) => tls is null ? ["--port", port]
            : ["--port", "0", "--tls-port", port, "--tls-cert-file", tls.CertificateFile, "--tls-key-file", tls.KeyFile,
               "--tls-ca-cert-file", tls.CaFile, "--tls-auth-clients", "no"];
        return StartExternalAsync(Redis + (tls is null ? "" : TlsSuffix), program, version, (port, dir) =>
            [.. Listen(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--maxmemory", maxMemoryBytes.ToString(System.Globalization.CultureInfo.InvariantCulture), "--dir", dir!], needsDir: true, ct,
            tls is null ? null : CacheTls.Create(tls.CaFile), tls?.CaFile);
    }

    /// <summary>--memory caps garnet's main log at the 2 GB the others get (its default is 16 GB); 64 KB values fit its default 16 MB pages.</summary>
    public static Task<CacheBenchServer> StartGarnetAsync(string program, CancellationToken ct)
    {
        var version = CacheBenchTools.Version(program, @"Garnet\w*\s+v?([0-9][0-9.]*)");
        return StartExternalAsync(Garnet, program, version, (port, _) => ["--port", port, "--bind", "127.0.0.1", "--memory", "2g"], needsDir: false, ct, null, null);
    }

    /// <summary>
    /// Redis and garnet need a port number up front: the kernel hands out a free one, which is released just before
    /// the server binds it. A server that loses that race exits, which the readiness loop notices.
    /// </summary>
    private static async Task<CacheBenchServer> StartExternalAsync(string name, string program, string? version, Func<string, string?, string[]> args,
        bool needsDir, CancellationToken ct, CacheTls? tls, string? caFile)
    {
        int port;
        using (var probe = new TcpListener(IPAddress.Loopback, 0))
        {
            probe.Start();
            port = ((IPEndPoint)probe.LocalEndpoint).Port;
        }
        var endpoint = new CacheEndpoint("127.0.0.1", port);
        string? scratch = null;
        ExternalProcess? p = null;
        try
        {
            if (needsDir) scratch = Directory.CreateTempSubdirectory("hpcdata-bench-cache-").FullName;
            p = ExternalProcess.Start(name, program, args(port.ToString(System.Globalization.CultureInfo.InvariantCulture), scratch));
            await WaitForPongAsync(p, endpoint, tls, ct);
            return new CacheBenchServer(name, version, endpoint, null, p, scratch) { Tls = tls, CaFile = caFile };
        }
        catch
        {
            if (p is not null) await p.DisposeAsync();
            DeleteScratch(scratch);
            throw;
        }
    }

    private static async Task WaitForPongAsync(ExternalProcess p, CacheEndpoint endpoint, CacheTls? tls, CancellationToken ct)
    {
        var deadline = Stopwatch.StartNew();
        for (var attempt = 0; deadline.Elapsed < ReadyTimeout; attempt++)
        {
            if (p.HasExited) throw new InvalidOperationException($"{p.Name} exited before it was ready:{Environment.NewLine}{p.Tail}");
            try
            {
                await using var c = await RespConnection.ConnectAsync(endpoint, null, TimeSpan.FromSeconds(2), ct, tls: tls);
                c.Command("PING"u8);
                var reply = await c.FlushAndReadAsync(ct).AsTask().WaitAsync(TimeSpan.FromSeconds(5), ct);
                if (reply.Text == "PONG" && !p.HasExited) return;
            }
            catch (Exception e) when (e is CacheHostUnavailableException or TimeoutException or RespProtocolException || e is CommonDataException { Code: ErrorCode.AccessDenied }) { }
            await Task.Delay(Math.Min(50 * (attempt + 1), 500), ct);
        }
        throw new TimeoutException($"{p.Name} did not answer PING on {endpoint} within {ReadyTimeout.TotalSeconds:0} s:{Environment.NewLine}{p.Tail}");
    }

    /// <summary>CPU seconds the server has used so far (utime + stime from /proc).</summary>
    public double CpuSeconds() => ProcStats.Read(Name, Pid).CpuSeconds;

    private static void DeleteScratch(string? dir)
    {
        if (dir is null) return;
        try { Directory.Delete(dir, recursive: true); } catch (Exception e) when (e is IOException or UnauthorizedAccessException) { }
    }

    public async ValueTask DisposeAsync()
    {
        try
        {
            if (_component is not null) await _component.DisposeAsync();
            if (_external is not null) await _external.DisposeAsync();
        }
        finally { DeleteScratch(_scratch); }
    }
}
