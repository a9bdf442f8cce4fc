using System.Globalization;
using System.Text.RegularExpressions;

namespace Hpc.Bench;

/// <summary>
/// The scale-model network: one bridge in the root namespace, one network namespace per cache host and per compute
/// node, each joined to the bridge by a veth pair whose two ends are both shaped with tc, so a link is limited in both
/// directions like a real NIC port. Addresses come only from 198.18.0.0/15 (RFC 2544 benchmarking), which no real
/// network routes, so nothing here can collide with or leak onto the machine's own networks.
/// Every name starts with "hcd", so leftovers are easy to find and <see cref="Clean"/> can remove them. An
/// <em>instance</em> number (0–63) gives a cluster names and a /22 of its own (instance k: namespaces hcd{k}-h1…,
/// links hcd{k}h1…, bridge hcdbr{k}, 198.18.4k.0/22; instance 0 drops the k from the namespace and link names), so two
/// clusters can exist side by side and a dead run's leftovers block only its own instance.
/// </summary>
public sealed partial class Topology
{
    public const string Prefix = "hcd";
    public const int MaxInstance = 63;

    public sealed record Member(string Namespace, string Link, string Address);

    public int Instance { get; }
    public string Bridge { get; }
    public string BridgeAddress { get; }
    /// <summary>The cluster's whole address block (bridge, hosts and nodes), e.g. for an MPI library's interface selection.</summary>
    public string Subnet => $"198.18.{4 * Instance}.0{Mask}";
    public IReadOnlyList<Member> Hosts { get; }
    public IReadOnlyList<Member> Nodes { get; }
    public int RateMbit { get; }
    public double DelayMs { get; }
    /// <summary>Queue at each member's own egress: "fifo" (the HTB leaf default), "fq_codel" (flow-fair, the default
    /// qdisc of most Linux distributions, so what a real host's NIC would use) or "ack-first" (small packets — ACKs,
    /// handshakes — ahead of bulk data, the part of fq_codel's sparse-flow priority that matters to a node sending and
    /// receiving at once, built from HTB and u32 alone for kernels without fq_codel). Switch-side queues stay FIFO.</summary>
    public string HostQueue { get; }
    private const string Mask = "/22";
    private readonly List<string> _createdNamespaces = [];
    private bool _bridgeCreated;

    /// <summary>Nodes (0-based) whose link is shaped to a rate of their own, in kbit/s, both ends: a bad cable, a degraded NIC.</summary>
    public IReadOnlyDictionary<int, int> SlowNodesKbit { get; }

    public Topology(int hosts, int nodes, int rateMbit, double delayMs, string hostQueue = "fifo", int instance = 0, IReadOnlyDictionary<int, int>? slowNodesKbit = null)
    {
        if (hostQueue is not ("fifo" or "fq_codel" or "ack-first")) throw new ArgumentException($"queue '{hostQueue}': use fifo, fq_codel or ack-first");
        if (hostQueue != "fifo" && delayMs > 0) throw new ArgumentException($"a delay (netem) and {hostQueue} cannot both be the link's leaf queue; choose one");
        if (hosts is < 1 or > 250) throw new ArgumentOutOfRangeException(nameof(hosts), "1..250 cache hosts");
        if (nodes is < 1 or > 250) throw new ArgumentOutOfRangeException(nameof(nodes), "1..250 nodes");
        if (instance is < 0 or > MaxInstance) throw new ArgumentOutOfRangeException(nameof(instance), $"instance 0..{MaxInstance}");
        Instance = instance;
        var tag = InstanceTag(instance);
        var net = 4 * instance;
        Bridge = $"{Prefix}br{instance}";
        BridgeAddress = $"198.18.{net}.1";
        Hosts = Enumerable.Range(1, hosts).Select(h => new Member($"{Prefix}{tag}-h{h}", $"{Prefix}{tag}h{h}", $"198.18.{net + 1}.{h}")).ToList();
        Nodes = Enumerable.Range(1, nodes).Select(n => new Member($"{Prefix}{tag}-n{n}", $"{Prefix}{tag}n{n}", $"198.18.{net + 2}.{n}")).ToList();
        RateMbit = rateMbit;
        DelayMs = delayMs;
        HostQueue = hostQueue;
        SlowNodesKbit = slowNodesKbit ?? new Dictionary<int, int>();
        if (SlowNodesKbit.Keys.Any(n => n < 0 || n >= nodes)) throw new ArgumentOutOfRangeException(nameof(slowNodesKbit), $"slow nodes are among the {nodes} nodes");
    }

    private static string InstanceTag(int instance) => instance == 0 ? "" : instance.ToString(CultureInfo.InvariantCulture);

    /// <summary>
    /// Whether this kernel can build a queueing discipline, tried on a throw-away veth pair in a namespace of its own,
    /// because schedulers such as fq_codel and netem are modules a minimal kernel may lack, and finding out half-way
    /// through building a cluster would leave a broken network behind. Returns tc's complaint when it cannot.
    /// </summary>
    public static string? QdiscUnavailable(string kind)
    {
        var ns = $"{Prefix}-probe-{Environment.ProcessId}";
        try
        {
            Shell.Check("ip", "netns", "add", ns);
            Shell.Check("ip", "-n", ns, "link", "add", "dev", "p0", "type", "veth", "peer", "name", "p1");
            var r = Shell.Run("tc", ["-n", ns, "qdisc", "add", "dev", "p0", "root", .. kind.Split(' ')]);
            return r.ExitCode == 0 ? null : r.Stderr.Trim();
        }
        finally { Shell.Run("ip", "netns", "del", ns); }
    }

    // Namespaces hcd-h1 / hcd7-n12, links hcdh1 / hcd7n12 / hcdbr7; group 1 is the instance ("" for 0).
    [GeneratedRegex(@"^hcd([1-9][0-9]?)?-[hn][0-9]+$")] private static partial Regex NamespaceName();
    [GeneratedRegex(@"^hcd(?:([1-9][0-9]?)?[hn][0-9]+|br([0-9]+))$")] private static partial Regex LinkName();
    // Scratch of run with process id P: /dev/shm/hcd-P and its agents' sockets /tmp/CoreFxPipe_hcdPn1…
    [GeneratedRegex(@"^hcd-([0-9]+)$")] private static partial Regex ScratchName();
    [GeneratedRegex(@"^CoreFxPipe_hcd([0-9]+)n[0-9]+$")] private static partial Regex SocketName();

    private static int InstanceOf(Match m) => m.Groups.Cast<Group>().Skip(1).FirstOrDefault(g => g.Success) is { } g
        ? int.Parse(g.Value, CultureInfo.InvariantCulture) : 0;

    /// <summary>Namespaces and links of an instance (of every instance when null) that exist now: another run's, live or
    /// dead, which a new run of the same instance would collide with.</summary>
    public static List<string> Leftovers(int? instance) =>
        [.. Namespaces(instance).Select(n => $"namespace {n}"), .. Links(instance).Select(l => $"link {l}")];

    /// <summary>Scratch directories and agent sockets whose bench process is gone. They collide with nothing (names carry
    /// the process id) but hold tmpfs memory, so a run mentions them and <c>bench clean</c> removes them.</summary>
    public static List<string> StaleScratch()
    {
        var paths = new List<string>();
        if (Directory.Exists("/dev/shm"))
            paths.AddRange(Directory.GetDirectories("/dev/shm", Prefix + "-*").Where(p => Dead(ScratchName().Match(Path.GetFileName(p)))));
        paths.AddRange(Directory.GetFiles(Path.GetTempPath(), "CoreFxPipe_" + Prefix + "*").Where(p => Dead(SocketName().Match(Path.GetFileName(p)))));
        return paths;

        static bool Dead(Match m) => m.Success && !Directory.Exists($"/proc/{m.Groups[1].Value}");
    }

    /// <summary>The lowest instance with nothing of it left on this machine, or -1.</summary>
    public static int FreeInstance(int from = 0)
    {
        var used = Namespaces(null).Select(n => InstanceOf(NamespaceName().Match(n)))
            .Concat(Links(null).Select(l => InstanceOf(LinkName().Match(l)))).ToHashSet();
        for (var i = from; i <= MaxInstance; i++) if (!used.Contains(i)) return i;
        return -1;
    }

    private static IEnumerable<string> Namespaces(int? instance) =>
        Shell.Run("ip", "netns", "list").Stdout.Split('\n', StringSplitOptions.RemoveEmptyEntries)
            .Select(l => l.Split(' ')[0])
            .Where(n => NamespaceName().Match(n) is { Success: true } m && (instance is null || InstanceOf(m) == instance));

    private static IEnumerable<string> Links(int? instance) =>
        Directory.Exists("/sys/class/net")
            ? Directory.GetDirectories("/sys/class/net").Select(Path.GetFileName).OfType<string>()
                .Where(n => LinkName().Match(n) is { Success: true } m && (instance is null || InstanceOf(m) == instance))
            : [];

    public void Create()
    {
        Shell.Check("ip", "link", "add", Bridge, "type", "bridge");
        _bridgeCreated = true;
        Shell.Check("ip", "addr", "add", BridgeAddress + Mask, "dev", Bridge);
        Shell.Check("ip", "link", "set", Bridge, "up");
        foreach (var m in Hosts.Concat(Nodes)) AddMember(m);
    }

    private void AddMember(Member m)
    {
        Shell.Check("ip", "netns", "add", m.Namespace);
        _createdNamespaces.Add(m.Namespace);
        Shell.Check("ip", "link", "add", m.Link, "type", "veth", "peer", "name", "eth0", "netns", m.Namespace);
        Shell.Check("ip", "link", "set", m.Link, "master", Bridge, "up");
        Shell.Check("ip", "-n", m.Namespace, "addr", "add", m.Address + Mask, "dev", "eth0");
        Shell.Check("ip", "-n", m.Namespace, "link", "set", "eth0", "up");
        Shell.Check("ip", "-n", m.Namespace, "link", "set", "lo", "up");
        var node = Nodes.ToList().IndexOf(m);
        var kbit = node >= 0 && SlowNodesKbit.TryGetValue(node, out var slow) ? slow : RateMbit * 1000;
        Shape(null, m.Link, "fifo", kbit);            // root side: what the member receives (a switch port)
        Shape(m.Namespace, "eth0", HostQueue, kbit);  // member side: what it sends
    }

    /// <summary>
    /// HTB (a single class holding the rate) rather than bare TBF, so an optional netem delay can hang below it
    /// without netem's own rate emulation, which is coarser. r2q is raised so the quantum stays sane at 100 Mbit/s.
    /// </summary>
    private void Shape(string? ns, string dev, string queue, int kbit)
    {
        string[] Tc(params string[] a) => ns is null ? a : ["-n", ns, .. a];
        var rate = kbit.ToString(CultureInfo.InvariantCulture) + "kbit";
        if (queue == "ack-first")
        {
            // One class holds the link's rate; below it small packets (IP length under 256) go first and bulk takes the
            // rest. With one FIFO a node's ACKs for what it receives wait behind up to a queue's worth of what it sends
            // (half a second at 25 Mbit/s), and both directions slow down: iperf3 between 4 namespaces in a ring,
            // 0.86–0.94 of the rate; with this, 0.94–0.95.
            var (small, bulk) = (Math.Max(1, kbit / 10_000) * 1000, kbit - Math.Max(1, kbit / 10_000) * 1000);
            Shell.Check("tc", Tc("qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "20", "r2q", "100"));
            Shell.Check("tc", Tc("class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", rate, "ceil", rate));
            Shell.Check("tc", Tc("class", "add", "dev", dev, "parent", "1:1", "classid", "1:10", "htb", "rate", $"{small}kbit", "ceil", rate, "prio", "0"));
            Shell.Check("tc", Tc("class", "add", "dev", dev, "parent", "1:1", "classid", "1:20", "htb", "rate", $"{Math.Max(1, bulk)}kbit", "ceil", rate, "prio", "1"));
            Shell.Check("tc", Tc("filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                "match", "u16", "0x0000", "0xff00", "at", "2", "flowid", "1:10"));
            return;
        }
        Shell.Check("tc", Tc("qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1", "r2q", "100"));
        Shell.Check("tc", Tc("class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", rate, "ceil", rate));
        if (DelayMs > 0)
            Shell.Check("tc", Tc("qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "netem",
                "delay", DelayMs.ToString("0.###", CultureInfo.InvariantCulture) + "ms", "limit", "100000"));
        else if (queue == "fq_codel")
            Shell.Check("tc", Tc("qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "fq_codel"));
    }

    /// <summary>The launcher prefix that runs a program inside a member's namespace (ip exec's it in place).</summary>
    public static IReadOnlyList<string> Launcher(Member m) => ["ip", "netns", "exec", m.Namespace];

    /// <summary>Removes what this run created; never throws, so it can run in finally blocks.</summary>
    public void Destroy()
    {
        foreach (var ns in _createdNamespaces) KillNamespace(ns);
        foreach (var ns in _createdNamespaces) Shell.Run("ip", "netns", "del", ns);
        if (_bridgeCreated) Shell.Run("ip", "link", "del", Bridge);
        WaitLinksGone(Instance);
        // A namespace the kernel still holds (sockets of a node whose link was set down, retransmitting to a peer that
        // is gone) outlives its name, and with it the host ends of its links: the next run would refuse to start.
        foreach (var link in Links(Instance).ToList()) Shell.Run("ip", "link", "del", link);
    }

    /// <summary>Removes the namespaces and links of one instance (every instance when null), the processes inside those
    /// namespaces first, and every stale scratch directory and socket.</summary>
    public static List<string> Clean(int? instance = null)
    {
        var removed = new List<string>();
        foreach (var ns in Namespaces(instance).Concat(instance is null ? DeadProbes() : []).ToList())
        {
            KillNamespace(ns);
            Shell.Run("ip", "netns", "del", ns);
            removed.Add($"namespace {ns}");
        }
        foreach (var link in Links(instance).ToList())
        {
            Shell.Run("ip", "link", "del", link);
            removed.Add($"link {link}");
        }
        WaitLinksGone(instance);
        foreach (var p in StaleScratch())
        {
            try
            {
                if (Directory.Exists(p)) Directory.Delete(p, recursive: true); else File.Delete(p);
                removed.Add($"path {p}");
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException) { Console.Error.WriteLine($"cannot remove {p}: {e.Message}"); }
        }
        return removed;
    }

    /// <summary>Probe namespaces of bench processes that died between creating and deleting them.</summary>
    private static IEnumerable<string> DeadProbes() =>
        Shell.Run("ip", "netns", "list").Stdout.Split('\n', StringSplitOptions.RemoveEmptyEntries).Select(l => l.Split(' ')[0])
            .Where(n => n.StartsWith(Prefix + "-probe-", StringComparison.Ordinal) && !Directory.Exists($"/proc/{n[(Prefix.Length + 7)..]}"));

    /// <summary>Only processes inside our own namespaces: everything there was started by a bench run.</summary>
    /// <summary>
    /// A fault on one member, as a node fails: <c>kill</c> (every process in its namespace SIGKILLed, as a crash or power
    /// loss), <c>down</c> (its link set down: the cable or switch port), <c>stop</c> (its processes SIGSTOPped: a node
    /// that hangs with its connections open). <see cref="Recover"/> undoes down and stop; a killed member's processes
    /// are its owner's to start again.
    /// </summary>
    public static void Fault(Member m, string kind)
    {
        switch (kind)
        {
            case "kill": KillNamespace(m.Namespace); break;
            case "down": Shell.Check("ip", "link", "set", m.Link, "down"); break;
            case "stop": Signal(m.Namespace, "STOP"); break;
            default: throw new ArgumentException($"fault '{kind}': use {FaultKinds}");
        }
    }

    public const string FaultKinds = "kill, down or stop";

    public static bool IsFault(string kind) => kind is "kill" or "down" or "stop";

    public static void Recover(Member m, string kind)
    {
        if (kind == "down") Shell.Check("ip", "link", "set", m.Link, "up");
        else if (kind == "stop") Signal(m.Namespace, "CONT");
    }

    private static void Signal(string ns, string signal)
    {
        var pids = Shell.Run("ip", "netns", "pids", ns).Stdout.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
        if (pids.Length > 0) Shell.Run("kill", ["-" + signal, .. pids]);
    }

    private static void KillNamespace(string ns)
    {
        var pids = Shell.Run("ip", "netns", "pids", ns).Stdout.Split('\n', StringSplitOptions.RemoveEmptyEntries);
        foreach (var pid in pids)
            if (int.TryParse(pid.Trim(), out var id))
                try { System.Diagnostics.Process.GetProcessById(id).Kill(entireProcessTree: true); } catch (Exception e) when (e is ArgumentException or InvalidOperationException or System.ComponentModel.Win32Exception) { }
    }

    /// <summary>Namespace deletion frees its veth ends asynchronously; a following run must not trip over them.</summary>
    private static void WaitLinksGone(int? instance)
    {
        for (var i = 0; i < 50 && Links(instance).Any(); i++) Thread.Sleep(100);
    }
}
