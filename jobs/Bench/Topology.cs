using System.Globalization;

namespace Hpc.Jobs.Bench;

/// <summary>
/// The scale-model network: one bridge in the root namespace, one network namespace per cache host and per compute
/// node, each joined to the bridge by a veth pair whose two ends are both shaped with tc, so a link is limited in both
/// directions like a real NIC port. Addresses come only from 198.18.0.0/15 (RFC 2544 benchmarking), which no real
/// network routes, so nothing here can collide with or leak onto the machine's own networks.
/// Every name starts with "hcd", so leftovers are easy to find and <see cref="CleanAll"/> can remove them.
/// </summary>
public sealed class Topology
{
    public const string Prefix = "hcd";
    public const string Bridge = "hcdbr0";
    public const string BridgeAddress = "198.18.0.1";
    private const string Mask = "/15";

    public sealed record Member(string Namespace, string Link, string Address);

    public IReadOnlyList<Member> Hosts { get; }
    public IReadOnlyList<Member> Nodes { get; }
    public int RateMbit { get; }
    public double DelayMs { get; }
    /// <summary>Queue at each member's own egress: "fifo" (the HTB leaf default) or "fq_codel" (flow-fair, the default
    /// qdisc of most Linux distributions, so what a real cache host's NIC would use). Switch-side queues stay FIFO.</summary>
    public string HostQueue { get; }
    private readonly List<string> _createdNamespaces = [];
    private bool _bridgeCreated;

    public Topology(int hosts, int nodes, int rateMbit, double delayMs, string hostQueue = "fifo")
    {
        if (hostQueue is not ("fifo" or "fq_codel")) throw new ArgumentException($"queue '{hostQueue}': use fifo or fq_codel");
        if (hostQueue != "fifo" && delayMs > 0) throw new ArgumentException("a delay (netem) and fq_codel cannot both be the link's leaf queue; choose one");
        if (hosts is < 1 or > 250) throw new ArgumentOutOfRangeException(nameof(hosts), "1..250 cache hosts");
        if (nodes is < 1 or > 250) throw new ArgumentOutOfRangeException(nameof(nodes), "1..250 nodes");
        Hosts = Enumerable.Range(1, hosts).Select(h => new Member($"hcd-h{h}", $"hcdh{h}", $"198.18.1.{h}")).ToList();
        Nodes = Enumerable.Range(1, nodes).Select(n => new Member($"hcd-n{n}", $"hcdn{n}", $"198.18.2.{n}")).ToList();
        RateMbit = rateMbit;
        DelayMs = delayMs;
        HostQueue = hostQueue;
    }

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

    /// <summary>Leftover namespaces, links, sockets and scratch directories of an earlier run, by name.</summary>
    public static List<string> Leftovers()
    {
        var found = new List<string>();
        found.AddRange(Namespaces().Select(n => $"namespace {n}"));
        found.AddRange(Links().Select(l => $"link {l}"));
        found.AddRange(ScratchPaths().Select(p => $"path {p}"));
        return found;
    }

    private static IEnumerable<string> Namespaces() =>
        Shell.Run("ip", "netns", "list").Stdout.Split('\n', StringSplitOptions.RemoveEmptyEntries)
            .Select(l => l.Split(' ')[0]).Where(n => n.StartsWith(Prefix, StringComparison.Ordinal));

    private static IEnumerable<string> Links() =>
        Directory.Exists("/sys/class/net")
            ? Directory.GetDirectories("/sys/class/net").Select(Path.GetFileName).OfType<string>().Where(n => n.StartsWith(Prefix, StringComparison.Ordinal))
            : [];

    private static IEnumerable<string> ScratchPaths()
    {
        var paths = new List<string>();
        if (Directory.Exists("/dev/shm")) paths.AddRange(Directory.GetDirectories("/dev/shm", Prefix + "-*"));
        paths.AddRange(Directory.GetFiles(Path.GetTempPath(), "CoreFxPipe_" + Prefix + "*"));
        return paths;
    }

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
        Shape(null, m.Link, "fifo");            // root side: what the member receives (a switch port)
        Shape(m.Namespace, "eth0", HostQueue);  // member side: what it sends
    }

    /// <summary>
    /// HTB (a single class holding the rate) rather than bare TBF, so an optional netem delay can hang below it
    /// without netem's own rate emulation, which is coarser. r2q is raised so the quantum stays sane at 100 Mbit/s.
    /// </summary>
    private void Shape(string? ns, string dev, string queue)
    {
        string[] Tc(params string[] a) => ns is null ? a : ["-n", ns, .. a];
        var rate = RateMbit.ToString(CultureInfo.InvariantCulture) + "mbit";
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
        WaitLinksGone();
    }

    /// <summary>Removes every hcd* namespace, link, socket and scratch directory; the processes inside namespaces first.</summary>
    public static List<string> CleanAll()
    {
        var removed = new List<string>();
        foreach (var ns in Namespaces().ToList())
        {
            KillNamespace(ns);
            Shell.Run("ip", "netns", "del", ns);
            removed.Add($"namespace {ns}");
        }
        foreach (var link in Links().ToList())
        {
            Shell.Run("ip", "link", "del", link);
            removed.Add($"link {link}");
        }
        WaitLinksGone();
        foreach (var p in ScratchPaths().ToList())
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

    /// <summary>Only processes inside our own namespaces: everything there was started by a bench run.</summary>
    private static void KillNamespace(string ns)
    {
        var pids = Shell.Run("ip", "netns", "pids", ns).Stdout.Split('\n', StringSplitOptions.RemoveEmptyEntries);
        foreach (var pid in pids)
            if (int.TryParse(pid.Trim(), out var id))
                try { System.Diagnostics.Process.GetProcessById(id).Kill(entireProcessTree: true); } catch (Exception e) when (e is ArgumentException or InvalidOperationException or System.ComponentModel.Win32Exception) { }
    }

    /// <summary>Namespace deletion frees its veth ends asynchronously; a following run must not trip over them.</summary>
    private static void WaitLinksGone()
    {
        for (var i = 0; i < 50 && Links().Any(); i++) Thread.Sleep(100);
    }
}
