using System.Diagnostics;
using System.Runtime.Versioning;
using System.Text.Json;
using Hpc.CommonData.Access;
using Hpc.CommonData.Hosting;

namespace Hpc.Integration.Tests;

/// <summary>A fact that needs root on Linux: it creates Unix users and runs programs as them.</summary>
public sealed class RootOnLinuxFactAttribute : FactAttribute
{
    public RootOnLinuxFactAttribute()
    {
        if (!OperatingSystem.IsLinux()) Skip = "per-dataset access is enforced on Linux only";
        else if (UnixAccounts.EffectiveUserId != 0) Skip = "needs root: the test creates two Unix users and runs workers as them (CI runs as root)";
    }
}

/// <summary>A theory that needs root on Linux, for the same reasons as <see cref="RootOnLinuxFactAttribute"/>.</summary>
public sealed class RootOnLinuxTheoryAttribute : TheoryAttribute
{
    public RootOnLinuxTheoryAttribute()
    {
        if (!OperatingSystem.IsLinux()) Skip = "per-dataset access is enforced on Linux only";
        else if (UnixAccounts.EffectiveUserId != 0) Skip = "needs root: the test gives files other owners (CI runs as root)";
    }
}

/// <summary>
/// Readers named at stage time, with real users of this machine: a real cache host, stager and agent (as root), and
/// the worker command run as a reader and as a stranger, who are also tried on the published file directly.
/// </summary>
[SupportedOSPlatform("linux")]
public sealed class AccessTests
{
    internal const string Alice = "hpcdata-t-alice", Bob = "hpcdata-t-bob";

    [RootOnLinuxFact]
    public async Task Only_a_named_reader_opens_a_dataset_through_the_agent_or_reads_its_copy_on_disk_and_a_stranger_gets_one_line_and_exit_1()
    {
        EnsureUser(Alice);
        EnsureUser(Bob);
        await using var cluster = new Cluster();
        await cluster.StartCacheHostAsync();
        var data = Cluster.RandomBytes(300_000, seed: 11);
        var input = Cluster.WriteFile(cluster.Root, "secret.bin", data);
        var staged = await cluster.StageAsync(input, "risk/secret", "--readers", $"user:{Alice}");
        var (_, pipe, dataDir) = await cluster.StartAgentAsync();

        var socket = NodeAgentOptions.SocketPath(pipe);
        Assert.True((File.GetUnixFileMode(socket) & (UnixFileMode.OtherWrite | UnixFileMode.OtherRead)) == (UnixFileMode.OtherWrite | UnixFileMode.OtherRead),
            $"the agent's socket must admit every user; it is {File.GetUnixFileMode(socket)}");
        var run = WorkerRunner.Prepare(cluster.Root, Alice);
        var env = new Dictionary<string, string?> { ["HPCDATA_AGENT_PIPE"] = pipe, ["HPCDATA_CACHE_HOSTS"] = "127.0.0.1:1" };

        var alice = await run.AsUserAsync(Alice, [.. run.Worker, "worker", "risk/secret", "--mode", "map", "--verify", "--reopens", "0"], env);
        Assert.True(alice.Code == 0, $"the reader's worker failed ({alice.Code}): {alice.Stderr}");
        var result = JsonDocument.Parse(alice.Text.Trim().Split('\n').Last()).RootElement;
        Assert.Equal(staged.Version, result.GetProperty("version").GetString());
        Assert.Equal(data.Length, result.GetProperty("bytes").GetInt64());
        Assert.True(result.GetProperty("verified").GetBoolean());
        Assert.True(result.GetProperty("verifyMs").GetDouble() > 0); // --verify: its own hash of the mapped copy matched the staged hash
        Assert.Equal("map", result.GetProperty("mode").GetString());

        var bob = await run.AsUserAsync(Bob, [.. run.Worker, "worker", "risk/secret", "--reopens", "0"], env);
        Assert.Equal(ExitCodes.Denied, bob.Code);
        var lines = bob.Stderr.Split('\n', StringSplitOptions.RemoveEmptyEntries);
        Assert.True(lines.Length == 1, $"a refused worker prints one line, not:\n{bob.Stderr}");
        Assert.Contains("access denied", lines[0]);
        Assert.Contains("'risk/secret'", lines[0]);
        Assert.Contains(Bob, lines[0]);
        Assert.Empty(bob.Text.Trim());

        var copy = Path.Combine(dataDir, "complete", staged.Version + ".data");
        var aliceCat = await run.AsUserAsync(Alice, ["cat", copy]);
        Assert.Equal(0, aliceCat.Code);
        Assert.Equal(data, aliceCat.Stdout);
        var bobCat = await run.AsUserAsync(Bob, ["cat", copy]);
        Assert.NotEqual(0, bobCat.Code);
        Assert.Contains("Permission denied", bobCat.Stderr);
        Assert.Empty(bobCat.Stdout);
        var bobList = await run.AsUserAsync(Bob, ["ls", Path.Combine(dataDir, "complete")]);
        Assert.NotEqual(0, bobList.Code); // nor can he find out which versions the node holds
    }

    [RootOnLinuxFact]
    public async Task A_directory_dataset_s_tree_on_the_node_admits_exactly_its_readers_to_programs_that_read_files()
    {
        EnsureUser(Alice);
        EnsureUser(Bob);
        await using var cluster = new Cluster();
        await cluster.StartCacheHostAsync();
        var tree = Path.Combine(cluster.Root, "tree");
        var prices = Cluster.Csvish(100_000);
        Cluster.WriteFile(tree, "curves/prices.csv", prices);
        Cluster.WriteFile(tree, "README", "private curves\n"u8.ToArray());
        var staged = await cluster.StageAsync(tree, "risk/curves", "--readers", $"user:{Alice}");
        var (_, pipe, dataDir) = await cluster.StartAgentAsync();
        var run = WorkerRunner.Prepare(cluster.Root, Alice);
        var env = new Dictionary<string, string?> { ["HPCDATA_AGENT_PIPE"] = pipe, ["HPCDATA_CACHE_HOSTS"] = "127.0.0.1:1" };

        var alicePath = await run.AsUserAsync(Alice, [.. run.Worker, "path", "risk/curves"], env);
        Assert.True(alicePath.Code == 0, alicePath.Stderr);
        var nodeTree = alicePath.Text.Trim();
        Assert.Equal(Path.Combine(dataDir, "complete", staged.Version), nodeTree);
        var aliceCat = await run.AsUserAsync(Alice, ["cat", Path.Combine(nodeTree, "curves", "prices.csv")]);
        Assert.Equal(0, aliceCat.Code);
        Assert.Equal(prices, aliceCat.Stdout);
        var aliceList = await run.AsUserAsync(Alice, ["ls", nodeTree]);
        Assert.Equal(["README", "curves"], aliceList.Text.Trim().Split('\n'));

        var bobCat = await run.AsUserAsync(Bob, ["cat", Path.Combine(nodeTree, "curves", "prices.csv")]);
        Assert.NotEqual(0, bobCat.Code);
        Assert.Contains("Permission denied", bobCat.Stderr);
        Assert.Empty(bobCat.Stdout);
        var bobList = await run.AsUserAsync(Bob, ["ls", nodeTree]);
        Assert.NotEqual(0, bobList.Code);
        var bobPath = await run.AsUserAsync(Bob, [.. run.Worker, "path", "risk/curves"], env);
        Assert.Equal(ExitCodes.Denied, bobPath.Code);
        Assert.Contains("access denied", bobPath.Stderr);
    }

    [RootOnLinuxFact]
    public async Task A_worker_whose_user_may_not_connect_to_the_socket_gets_one_line_and_exit_denied()
    {
        EnsureUser(Bob);
        await using var cluster = new Cluster();
        await cluster.StartCacheHostAsync();
        var staged = await cluster.StageAsync(Cluster.WriteFile(cluster.Root, "open.bin", Cluster.RandomBytes(10_000)), "risk/open", "--readers", "all");
        var (_, pipe, _) = await cluster.StartAgentAsync();
        // An agent that keeps its socket to itself, as agents did before readers existed.
        File.SetUnixFileMode(NodeAgentOptions.SocketPath(pipe), UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute |
                                                                UnixFileMode.GroupRead | UnixFileMode.GroupExecute | UnixFileMode.OtherRead | UnixFileMode.OtherExecute);
        var run = WorkerRunner.Prepare(cluster.Root, Bob);

        var bob = await run.AsUserAsync(Bob, [.. run.Worker, "worker", "risk/open", "--reopens", "0"],
            new Dictionary<string, string?> { ["HPCDATA_AGENT_PIPE"] = pipe, ["HPCDATA_CACHE_HOSTS"] = cluster.HostList });

        Assert.Equal(ExitCodes.Denied, bob.Code);
        var lines = bob.Stderr.Split('\n', StringSplitOptions.RemoveEmptyEntries);
        Assert.True(lines.Length == 1, $"a refused worker prints one line, not:\n{bob.Stderr}");
        Assert.Contains("access denied", lines[0]);
        Assert.Contains(Bob, lines[0]);
        Assert.NotEmpty(staged.Version);
    }

    /// <summary>Creates a system group if the machine has none of that name and makes <paramref name="user"/> a member; safe to repeat.</summary>
    internal static void EnsureGroupMember(string group, string user)
    {
        EnsureUser(user);
        if (UnixAccounts.GroupId(group) is null) Run("groupadd", ["--system", group], exitCodesAllowed: [0, 9]); // 9: made meanwhile
        Run("gpasswd", ["--add", user, group]);
    }

    private static void Run(string program, string[] args, int[]? exitCodesAllowed = null)
    {
        using var p = Process.Start(new ProcessStartInfo(program, args) { RedirectStandardError = true, RedirectStandardOutput = true, UseShellExecute = false })!;
        var error = p.StandardError.ReadToEnd();
        p.StandardOutput.ReadToEnd();
        p.WaitForExit();
        Assert.True((exitCodesAllowed ?? [0]).Contains(p.ExitCode), $"{program} {string.Join(' ', args)} failed ({p.ExitCode}): {error}");
    }

    /// <summary>Creates a system user without a home if the machine has none of that name; safe to repeat and to race.</summary>
    internal static void EnsureUser(string name)
    {
        if (UnixAccounts.UserId(name) is not null) return;
        using var p = Process.Start(new ProcessStartInfo("useradd", ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name])
            { RedirectStandardError = true, UseShellExecute = false })!;
        var error = p.StandardError.ReadToEnd();
        p.WaitForExit();
        // 9: the name was taken in the meantime (another test process made it).
        Assert.True(p.ExitCode is 0 or 9 && UnixAccounts.UserId(name) is not null, $"useradd {name} failed ({p.ExitCode}): {error}");
    }
}

/// <summary>
/// Runs programs as another user. The worker command is copied beside the test's files (the build tree may sit in a
/// directory other users cannot enter, such as root's home), and so is the .NET runtime when theirs is out of reach.
/// </summary>
[SupportedOSPlatform("linux")]
public sealed class WorkerRunner
{
    public required string[] Worker { get; init; }
    public required string WorkingDirectory { get; init; }
    public string? DotnetRoot { get; init; }

    public sealed record Outcome(int Code, byte[] Stdout, string Stderr)
    {
        public string Text => System.Text.Encoding.UTF8.GetString(Stdout);
    }

    public static WorkerRunner Prepare(string root, string user)
    {
        Assert.True(Run(user, ["test", "-x", root], root).Code == 0,
            $"{root} is not reachable by other users; run the tests with TMPDIR set to a directory every user may enter");
        var bin = Path.Combine(root, "bin");
        var hpcdata = ComponentLocator.Find("hpcdata");
        CopyTree(Path.GetDirectoryName(hpcdata)!, bin);
        // hpcdata compiled to native code runs itself: no runtime to share with these users.
        if (ComponentLocator.IsNative(hpcdata)) return new WorkerRunner { Worker = [Path.Combine(bin, Path.GetFileName(hpcdata))], WorkingDirectory = root };
        var host = ComponentProcess.DotnetHost();
        if (!Path.IsPathRooted(host)) host = FindOnPath(host) ?? host;
        host = new FileInfo(host).ResolveLinkTarget(returnFinalTarget: true)?.FullName ?? host;
        string? dotnetRoot = null;
        if (Run(user, ["test", "-x", host], root).Code != 0)
        {
            // Only what running an app needs: the host, its resolver and the shared runtime.
            var installed = Path.GetDirectoryName(host)!;
            dotnetRoot = Path.Combine(root, "dotnet");
            CopyTree(Path.Combine(installed, "host"), Path.Combine(dotnetRoot, "host"));
            CopyTree(Path.Combine(installed, "shared", "Microsoft.NETCore.App"), Path.Combine(dotnetRoot, "shared", "Microsoft.NETCore.App"));
            File.Copy(host, Path.Combine(dotnetRoot, "dotnet"));
            host = Path.Combine(dotnetRoot, "dotnet");
        }
        return new WorkerRunner { Worker = [host, Path.Combine(bin, "hpcdata.dll")], WorkingDirectory = root, DotnetRoot = dotnetRoot };
    }

    public async Task<Outcome> AsUserAsync(string user, string[] command, IDictionary<string, string?>? env = null)
    {
        var extra = new Dictionary<string, string?>(env ?? new Dictionary<string, string?>());
        if (DotnetRoot is not null) extra["DOTNET_ROOT"] = DotnetRoot;
        extra["HOME"] = WorkingDirectory; // these users have no home; the runtime may want one for its caches
        return await Task.Run(() => Run(user, command, WorkingDirectory, extra));
    }

    private static Outcome Run(string user, string[] command, string cwd, IDictionary<string, string?>? env = null)
    {
        var info = new ProcessStartInfo("setpriv") { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false, WorkingDirectory = cwd };
        foreach (var a in new[] { $"--reuid={user}", $"--regid={user}", "--init-groups", "--" }.Concat(command)) info.ArgumentList.Add(a);
        foreach (var (k, v) in env ?? new Dictionary<string, string?>()) info.Environment[k] = v;
        using var p = Process.Start(info)!;
        var stdout = new MemoryStream();
        var copy = p.StandardOutput.BaseStream.CopyToAsync(stdout);
        var stderr = p.StandardError.ReadToEndAsync();
        if (!p.WaitForExit(TimeSpan.FromMinutes(2)))
        {
            p.Kill(entireProcessTree: true);
            Assert.Fail($"{string.Join(' ', command)} as {user} did not finish in 2 minutes");
        }
        copy.Wait();
        return new Outcome(p.ExitCode, stdout.ToArray(), stderr.Result);
    }

    private static string? FindOnPath(string program) =>
        (Environment.GetEnvironmentVariable("PATH") ?? "").Split(':').Select(d => Path.Combine(d, program)).FirstOrDefault(File.Exists);

    /// <summary>Copies a directory tree, readable (and, for directories and programs, enterable) by everyone.</summary>
    private static void CopyTree(string from, string to)
    {
        Directory.CreateDirectory(to);
        foreach (var dir in Directory.EnumerateDirectories(from, "*", SearchOption.AllDirectories))
            Directory.CreateDirectory(Path.Combine(to, Path.GetRelativePath(from, dir)));
        foreach (var file in Directory.EnumerateFiles(from, "*", SearchOption.AllDirectories))
            File.Copy(file, Path.Combine(to, Path.GetRelativePath(from, file)), overwrite: true);
        const UnixFileMode open = UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute | UnixFileMode.GroupRead |
                                  UnixFileMode.GroupExecute | UnixFileMode.OtherRead | UnixFileMode.OtherExecute;
        foreach (var dir in Directory.EnumerateDirectories(to, "*", SearchOption.AllDirectories).Prepend(to)) File.SetUnixFileMode(dir, open);
    }
}
