using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Text.RegularExpressions;
using Hpc.CommonData.Hosting;

namespace Hpc.Bench;

/// <summary>
/// A real Slurm across the scale model's node namespaces, run as a site runs it: munged and slurmctld in the root
/// namespace on the bridge's address, one slurmd per node namespace under the node's own host name and address, and each
/// node with a /tmp and /dev/shm of its own (a mount namespace per slurmd), as separate machines have, so the same
/// agent socket and data paths mean a different node's on each. Debian's slurm-wlm and munge; MPI steps get PMI-2
/// (<c>MpiDefault=pmi2</c>), which MPICH's PMI-1 client speaks to. The Epilog runs <c>hpcdata noderelease</c> on
/// every node. Everything lives in one shared directory and is stopped on dispose.
/// </summary>
public sealed class SlurmLab : IAsyncDisposable
{
    private readonly List<Process> _daemons = [];
    private readonly Dictionary<int, Process> _slurmds = [];
    private readonly Dictionary<int, ComponentProcess> _agents = [];
    private readonly Topology _topology;
    private readonly BurstBufferSite? _site;

    /// <summary>The burst buffer site the controller runs, or null without the plugin.</summary>
    public BurstBufferSite? Site => _site;

    /// <summary>Configuration, munge socket, spool, logs and job output: shared by every node, outside any node's /tmp.</summary>
    public string Directory { get; }
    public string Conf => Path.Combine(Directory, "slurm.conf");
    public IReadOnlyList<string> NodeNames => _topology.Nodes.Select((_, i) => NodeName(i)).ToList();

    /// <summary>
    /// The environment a Slurm client command needs (the lab's configuration file), and which jobs inherit from sbatch.
    /// The nodes share one kernel: UCX (MPICH's transport) would find the other ranks "on this machine" and move their
    /// data through shared memory, past the links; held to TCP on the node's eth0, the ranks talk as separate machines do.
    /// </summary>
    public Dictionary<string, string?> Environment => new() { ["SLURM_CONF"] = Conf, ["UCX_TLS"] = "tcp,self", ["UCX_NET_DEVICES"] = "eth0" };

    private SlurmLab(Topology topology, string directory, BurstBufferSite? site)
    {
        _topology = topology;
        Directory = directory;
        _site = site;
    }

    /// <summary>
    /// Staging inside the scheduler as a site runs it: slurmctld with <c>BurstBufferType=burst_buffer/lua</c> and the
    /// repository's deploy/slurm/burst_buffer.lua (only its two site lines set), and on every node an agent started with
    /// the lab, before any job, listening for its peers with the key only root holds.
    /// </summary>
    /// <param name="CacheHosts">The cache tier (host:port,…) the hooks and agents use.</param>
    /// <param name="DrainSilentNodes">The site drains a job's nodes whose agent did not answer (<c>--drain-silent-nodes</c>).</param>
    /// <param name="PeerTimeout">The site's <c>--peer-timeout</c>; null leaves the product's default.</param>
    public sealed record BurstBufferSite(string CacheHosts, bool DrainSilentNodes = false, TimeSpan? PeerTimeout = null);

    /// <summary>The agents' shared key: root's (mode 0600), where the controller and every node's namespaces see it.</summary>
    public string PeerKeyFile => Path.Combine(Directory, "peer.key");

    /// <summary>Slurm refuses burst buffers to root: the lab's burst-buffer jobs are this user's, as on a cluster.</summary>
    public const string JobUser = "hcdlab-user";

    /// <summary>Where a burst-buffer job's script and output live (writable by <see cref="JobUser"/>).</summary>
    public string JobsDirectory => Path.Combine(Directory, "jobs");

    public static string NodeName(int index) => $"n{index + 1}";

    /// <summary>Slurm's default tree width (messages and sbcast's data fan out to this many nodes at each level).</summary>
    public const int DefaultTreeWidth = 50;

    /// <summary>
    /// sbcast sends every node its blocks from one process: on a 100 Mbit/s link shared by 15 nodes a block waits longer
    /// than Slurm's default 10 s and sbcast gives up half-way (exit 233). A site with such links raises it as well.
    /// </summary>
    public const int MessageTimeoutSeconds = 60;

    /// <summary>Why this machine cannot run the lab (not root, a program missing), or null.</summary>
    public static string? Unavailable() =>
        !OperatingSystem.IsLinux() ? "Slurm across namespaces needs Linux"
        : !Shell.IsRoot ? "not running as root (slurmd starts job steps, namespaces need root)"
        : new[] { "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "/usr/bin/sbatch", "/usr/bin/nsenter", "/usr/bin/unshare" }
            .FirstOrDefault(p => !File.Exists(p)) is { } missing ? $"{missing} is not installed (apt-get install slurm-wlm munge util-linux)"
        : null;

    /// <summary>Starts the daemons on an existing topology and waits until every node is idle.</summary>
    /// <param name="site">With a burst buffer site: the plugin configured and every node's agent running.</param>
    public static async Task<SlurmLab> StartAsync(Topology topology, CancellationToken ct = default, BurstBufferSite? site = null)
    {
        if (Unavailable() is { } why) throw new BenchRefusedException(why, 2);
        var dir = Path.Combine("/var/tmp", $"hcd-slurm-{System.Environment.ProcessId}-{topology.Instance}");
        var lab = new SlurmLab(topology, dir, site);
        try
        {
            lab.WriteConfiguration();
            lab.Start(null, "/usr/sbin/munged", "-F", "--force", "-S", $"{dir}/munge/munge.socket", "--pid-file", $"{dir}/munge/munged.pid",
                "--log-file", $"{dir}/munge/munged.log", "--seed-file", $"{dir}/munge/munged.seed");
            for (var i = 0; i < 50 && !File.Exists($"{dir}/munge/munge.socket"); i++) await Task.Delay(100, ct);
            lab.Start(null, "/usr/sbin/slurmctld", "-D", "-i", "-f", lab.Conf);
            for (var i = 0; i < topology.Nodes.Count; i++) await lab.StartNodeAsync(i, ct);
            await lab.WaitIdleAsync(ct);
            return lab;
        }
        catch
        {
            await lab.DisposeAsync();
            throw;
        }
    }

    /// <summary>Waits until every node is idle (after the start, or after a node was brought back).</summary>
    public async Task WaitIdleAsync(CancellationToken ct = default)
    {
        var clock = Stopwatch.StartNew();
        while (true)
        {
            var state = await RunAsync("sinfo", "-h", "-N", "-o", "%N %T");
            var idle = state.Output.Split('\n', StringSplitOptions.RemoveEmptyEntries).Count(l => l.EndsWith(" idle", StringComparison.Ordinal));
            if (state.Code == 0 && idle == _topology.Nodes.Count) return;
            if (clock.Elapsed > TimeSpan.FromSeconds(90) || _daemons.Take(2).Any(d => d.HasExited) || _slurmds.Values.Any(d => d.HasExited))
                throw new InvalidOperationException($"Slurm did not come up ({idle} of {_topology.Nodes.Count} nodes idle; sinfo: {state.Output.Trim()}):\n{Logs()}");
            await Task.Delay(300, ct);
        }
    }

    /// <summary>A node's slurmd, and with a burst buffer site its agent, in the node's namespaces; also to bring back a node
    /// whose processes were killed.</summary>
    public async Task StartNodeAsync(int i, CancellationToken ct = default)
    {
        System.IO.Directory.CreateDirectory(Path.Combine(Directory, "spool", NodeName(i)));
        File.Delete(Path.Combine(Directory, $"slurmd-{NodeName(i)}.pid"));
        _slurmds[i] = Start(_topology.Nodes[i], "/usr/sbin/slurmd", "-D", "-N", NodeName(i), "-f", Conf);
        if (_site is null) return;
        // Once slurmd has made the node's mount namespace, the agent joins it: its pipe and copies are the node's own.
        for (var k = 0; k < 100 && !File.Exists(Path.Combine(Directory, $"slurmd-{NodeName(i)}.pid")); k++) await Task.Delay(100, ct);
        if (_agents.Remove(i, out var old)) await old.DisposeAsync();
        var agent = ComponentProcess.Start(new NodeAgentOptions
        {
            NodeName = NodeName(i), PeerListen = $"{_topology.Nodes[i].Address}:{NodeAgentOptions.DefaultPeerPort}", PeerKeyFile = PeerKeyFile,
            CacheTier = { Hosts = [_site.CacheHosts] },
        }, name: $"agent-{NodeName(i)}", launcher: NodeLauncher(i));
        _agents[i] = agent;
        await agent.WaitReadyAsync(TimeSpan.FromSeconds(60), ct);
    }

    /// <summary>Runs a command inside node <paramref name="i"/>: its network, mount and host-name namespaces, as its slurmd sees them.</summary>
    public IReadOnlyList<string> NodeLauncher(int i) =>
        ["/usr/bin/nsenter", "-t", _slurmds[i].Id.ToString(CultureInfo.InvariantCulture), "--net", "--mount", "--uts", "--"];

    /// <summary>
    /// The time slurmctld allocated the job its nodes, from its own log (milliseconds: <c>LogTimeFormat=iso8601_ms</c>), as
    /// seconds since the epoch; null until it has.
    /// </summary>
    public double? AllocatedAt(string job)
    {
        var log = Path.Combine(Directory, "slurmctld.log");
        if (!File.Exists(log)) return null;
        using var reader = new StreamReader(new FileStream(log, FileMode.Open, FileAccess.Read, FileShare.ReadWrite));
        // The main scheduler says "Allocate JobId=N", the backfill scheduler (which starts jobs that waited for stage-in) "Started JobId=N".
        string[] markers = [$"Allocate JobId={job} ", $"Started JobId={job} "];
        for (var line = reader.ReadLine(); line is not null; line = reader.ReadLine())
            if (markers.Any(m => line.Contains(m, StringComparison.Ordinal)) && LogTime(line) is { } at) return at;
        return null;
    }

    /// <summary>slurmctld's log from <paramref name="offset"/> on (the lines a job's hooks wrote after it was submitted).</summary>
    public string ControllerLogSince(long offset)
    {
        using var s = new FileStream(Path.Combine(Directory, "slurmctld.log"), FileMode.Open, FileAccess.Read, FileShare.ReadWrite);
        s.Position = Math.Min(offset, s.Length);
        return new StreamReader(s).ReadToEnd();
    }

    public long ControllerLogLength => new FileInfo(Path.Combine(Directory, "slurmctld.log")) is { Exists: true } f ? f.Length : 0;

    /// <summary>A log line's time (<c>[2026-12-06T14:20:01.123]</c>, the machine's local time) as seconds since the epoch.</summary>
    public static double? LogTime(string line) =>
        line.StartsWith('[') && line.IndexOf(']') is > 1 and var end &&
        DateTime.TryParse(line[1..end], CultureInfo.InvariantCulture, DateTimeStyles.AssumeLocal, out var t)
            ? (t.ToUniversalTime() - DateTime.UnixEpoch).TotalSeconds : null;

    private void WriteConfiguration()
    {
        foreach (var d in new[] { "state", "spool", "munge", "jobs" }) System.IO.Directory.CreateDirectory(Path.Combine(Directory, d));
        var hpcdata = string.Join(' ', ComponentLocator.Command("hpcdata"));
        var epilog = Path.Combine(Directory, "epilog.sh");
        // --evict: each job starts on nodes without the last job's copy, so every run is timed cold.
        File.WriteAllText(epilog, $"#!/bin/sh\nexec {hpcdata} noderelease --job \"$SLURM_JOB_ID\" --evict >>{Directory}/epilog-$SLURMD_NODENAME.log 2>&1\n");
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(epilog, (UnixFileMode)0b111_101_101);
        var cpus = System.Environment.ProcessorCount;
        var nodes = string.Join("\n", _topology.Nodes.Select((n, i) =>
            $"NodeName={NodeName(i)} NodeAddr={n.Address} NodeHostname={NodeName(i)} CPUs={cpus} RealMemory=1024 State=UNKNOWN"));
        // The controller is this machine under its own name, reached by the nodes at the bridge's address.
        File.WriteAllText(Conf, $"""
            ClusterName=hcdlab
            SlurmctldHost={Dns.GetHostName()}({_topology.BridgeAddress})
            SlurmUser=root
            SlurmdUser=root
            AuthType=auth/munge
            AuthInfo=socket={Directory}/munge/munge.socket
            StateSaveLocation={Directory}/state
            SlurmdSpoolDir={Directory}/spool/%n
            SlurmctldPidFile={Directory}/slurmctld.pid
            SlurmdPidFile={Directory}/slurmd-%n.pid
            SlurmctldLogFile={Directory}/slurmctld.log
            SlurmdLogFile={Directory}/slurmd-%n.log
            SlurmctldPort={FreePort()}
            SlurmdPort=6818
            ProctrackType=proctrack/linuxproc
            TaskPlugin=task/none
            SelectType=select/cons_tres
            SelectTypeParameters=CR_Core
            JobAcctGatherType=jobacct_gather/none
            AccountingStorageType=accounting_storage/none
            MpiDefault=pmi2
            MessageTimeout={MessageTimeoutSeconds}
            TreeWidth={DefaultTreeWidth}
            ReturnToService=2
            Epilog={epilog}
            LogTimeFormat=iso8601_ms
            {(_site is null ? "" : "BurstBufferType=burst_buffer/lua")}
            {nodes}
            PartitionName=lab Nodes=n[1-{_topology.Nodes.Count}] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8

            """);
        if (_site is not null) WriteBurstBuffer(_site, hpcdata);
    }

    /// <summary>The deploy files beside slurm.conf, where the plugin looks for them, with the site's two lines set.</summary>
    private void WriteBurstBuffer(BurstBufferSite site, string hpcdata)
    {
        var lua = Resource("burst_buffer.lua");
        File.WriteAllText(PeerKeyFile, Convert.ToHexString(System.Security.Cryptography.RandomNumberGenerator.GetBytes(32)) + "\n");
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(PeerKeyFile, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        var line = $"local site = \"--peer-key-file {PeerKeyFile} --state-dir {Directory}/bb --cache-hosts {site.CacheHosts}{(site.DrainSilentNodes ? " --drain-silent-nodes" : "")}{(site.PeerTimeout is { } t ? string.Create(CultureInfo.InvariantCulture, $" --peer-timeout {t.TotalSeconds}s") : "")}\"";
        lua = Regex.Replace(lua, "^local hpcdata = .*$", $"local hpcdata = \"{hpcdata}\"", RegexOptions.Multiline);
        lua = Regex.Replace(lua, "^local site = .*$", line, RegexOptions.Multiline);
        if (!lua.Contains(line, StringComparison.Ordinal)) throw new InvalidOperationException("burst_buffer.lua has no 'local site = …' line");
        File.WriteAllText(Path.Combine(Directory, "burst_buffer.lua"), lua);
        File.WriteAllText(Path.Combine(Directory, "burst_buffer.conf"), Resource("burst_buffer.conf"));
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(JobsDirectory, (UnixFileMode)0b111_111_111 | UnixFileMode.StickyBit);
        if (Shell.Run("id", "-u", JobUser).ExitCode != 0 && Shell.Run("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", JobUser) is { ExitCode: not (0 or 9) } r)
            throw new InvalidOperationException($"useradd {JobUser} failed: {r.Stderr}");

        static string Resource(string name)
        {
            using var s = typeof(SlurmLab).Assembly.GetManifestResourceStream(name) ?? throw new InvalidOperationException($"{name} is not built into the bench");
            return new StreamReader(s).ReadToEnd();
        }
    }

    /// <summary>
    /// Starts a daemon in the root namespace, or a node's: in its network namespace (nsenter, so /sys stays the
    /// machine's and slurmd finds its cgroups), under the node's host name, and in a mount namespace of its own with a
    /// fresh /tmp and /dev/shm.
    /// </summary>
    private Process Start(Topology.Member? node, string program, params string[] args)
    {
        var info = node is null
            ? new ProcessStartInfo(program)
            : new ProcessStartInfo("/usr/bin/nsenter", [$"--net=/run/netns/{node.Namespace}", "/usr/bin/unshare", "--mount", "--uts", "--propagation", "slave",
                "/bin/sh", "-c", NodeSetup(NodeName(_topology.Nodes.ToList().IndexOf(node))) + " && exec \"$0\" \"$@\"", program]);
        info.UseShellExecute = false;
        info.RedirectStandardOutput = info.RedirectStandardError = true;
        foreach (var a in args) info.ArgumentList.Add(a);
        info.Environment["SLURM_CONF"] = Conf;
        var p = Process.Start(info)!;
        var log = Path.Combine(Directory, "daemons.err");
        p.OutputDataReceived += (_, _) => { };
        p.ErrorDataReceived += (_, e) => { if (e.Data is not null) lock (_daemons) File.AppendAllText(log, e.Data + "\n"); };
        p.BeginOutputReadLine();
        p.BeginErrorReadLine();
        _daemons.Add(p);
        return p;
    }

    /// <summary>
    /// The shell commands that make a node's mount namespace: its host name, a fresh /tmp and /dev/shm, and the shared
    /// trees that live under /tmp (a checkout there, the programs, the submitting directory) bound back in, so jobs
    /// find them on every node as on shared storage.
    /// </summary>
    private string NodeSetup(string node)
    {
        var keep = new[] { AppContext.BaseDirectory, System.IO.Directory.GetCurrentDirectory(), Path.GetDirectoryName(ComponentLocator.Find("hpcdata"))! }
            .Select(Path.GetFullPath).Where(p => p.StartsWith("/tmp/", StringComparison.Ordinal))
            .Select(p => p["/tmp/".Length..].Split('/')[0]).Distinct().ToList();
        var original = Path.Combine(Directory, $"tmp-of-{node}");
        System.IO.Directory.CreateDirectory(original);
        var steps = new List<string> { $"hostname {node}", $"mount --bind /tmp {original}", "mount -t tmpfs tmpfs /tmp", "mount -t tmpfs tmpfs /dev/shm" };
        steps.AddRange(keep.Select(k => $"mkdir -p '/tmp/{k}' && mount --bind '{original}/{k}' '/tmp/{k}'"));
        return string.Join(" && ", steps);
    }

    public async Task<(int Code, string Output)> RunAsync(string program, params string[] args)
    {
        var info = new ProcessStartInfo(program) { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
        foreach (var a in args) info.ArgumentList.Add(a);
        foreach (var (k, v) in Environment) info.Environment[k] = v;
        using var p = Process.Start(info)!;
        var stdout = p.StandardOutput.ReadToEndAsync();
        var stderr = p.StandardError.ReadToEndAsync();
        await p.WaitForExitAsync().WaitAsync(TimeSpan.FromSeconds(60));
        return (p.ExitCode, await stdout + await stderr);
    }

    /// <summary>Waits until the job has left the queue and returns its output file (written in <paramref name="workDir"/>).</summary>
    public async Task<string> WaitForJobAsync(string job, string workDir, TimeSpan timeout, CancellationToken ct = default)
    {
        var clock = Stopwatch.StartNew();
        var output = Path.Combine(workDir, $"slurm-{job}.out");
        while (await RunAsync("squeue", "-h", "-o", "%i", "-j", job) is var q &&
               (q.Code != 0 && !q.Output.Contains("Invalid job id") || q.Output.Split('\n').Any(l => l.Trim() == job) || !File.Exists(output)))
        {
            if (clock.Elapsed > timeout) throw new TimeoutException($"Slurm job {job} still queued or running after {timeout}:\n{Logs()}");
            await Task.Delay(300, ct);
        }
        return await File.ReadAllTextAsync(output);
    }

    /// <summary>The last lines of every daemon's log, for a failure message.</summary>
    public string Logs() => string.Join("\n", new[] { "slurmctld.log", "daemons.err", "munge/munged.log" }
            .Concat(NodeNames.SelectMany(n => new[] { $"slurmd-{n}.log", $"epilog-{n}.log" }))
            .Select(f => Path.Combine(Directory, f)).Where(File.Exists).Select(f => $"--- {f}\n{string.Join("\n", File.ReadLines(f).TakeLast(12))}"));

    private static int FreePort()
    {
        using var l = new TcpListener(IPAddress.Any, 0);
        l.Start();
        return ((IPEndPoint)l.LocalEndpoint).Port;
    }

    public async ValueTask DisposeAsync()
    {
        // Jobs first, so their steps and Epilogs end while the daemons that run them are still there.
        if (_daemons.Count > 2 && _daemons.Take(2).All(d => !d.HasExited))
        {
            await RunAsync("scancel", "--full", "--partition", "lab");
            for (var i = 0; i < 50 && (await RunAsync("squeue", "-h")).Output.Trim().Length > 0; i++) await Task.Delay(200);
        }
        foreach (var a in _agents.Values) await a.DisposeAsync();
        foreach (var p in Enumerable.Reverse(_daemons))
        {
            try { if (!p.HasExited) p.Kill(entireProcessTree: true); } catch (InvalidOperationException) { }
            try { await p.WaitForExitAsync().WaitAsync(TimeSpan.FromSeconds(10)); } catch (TimeoutException) { }
            p.Dispose();
        }
        try { System.IO.Directory.Delete(Directory, recursive: true); } catch (IOException) { } catch (UnauthorizedAccessException) { }
    }

    public override string ToString() => string.Create(CultureInfo.InvariantCulture, $"Slurm on {_topology.Nodes.Count} nodes ({Directory})");
}
