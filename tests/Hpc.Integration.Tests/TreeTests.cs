using System.Diagnostics;
using System.Text.Json;
using Hpc.CommonData.Format;

namespace Hpc.Integration.Tests;

/// <summary>
/// Directory datasets as users have them: a tree staged faithfully (links kept as links whatever they point at, byte
/// for byte, and never followed; hard links once, empty files and directories, modes and times) comes back identical with <c>hpcdata get</c>; what cannot be
/// staged is skipped with a warning or refused with a reason.
/// </summary>
public class TreeTests
{
    private static async Task<(int Code, string Output)> Shell(string script)
    {
        using var p = Process.Start(new ProcessStartInfo("bash", ["-c", script]) { RedirectStandardOutput = true, RedirectStandardError = true })!;
        var output = await p.StandardOutput.ReadToEndAsync() + await p.StandardError.ReadToEndAsync();
        await p.WaitForExitAsync();
        return (p.ExitCode, output);
    }

    /// <summary>Every case a real tree has that round-trips (no fifo): links of every kind, as a software environment has them.</summary>
    private static async Task<string> BuildTree(string root)
    {
        var tree = Path.Combine(root, "tree");
        var deep = string.Join('/', Enumerable.Repeat("d", 150));
        var (code, output) = await Shell($"""
            set -e
            mkdir -p '{tree}/a/b' '{tree}/empty-dir' '{tree}/{deep}'
            printf 'alpha\n' > '{tree}/a/one.csv'
            head -c 300000 /dev/urandom > '{tree}/a/b/big.bin'
            : > '{tree}/empty-file'
            printf 'x' > '{tree}/{deep}/leaf'
            printf '#!/bin/sh\necho hi\n' > '{tree}/a/run.sh'; chmod 750 '{tree}/a/run.sh'
            chmod 700 '{tree}/a/b'
            ln '{tree}/a/one.csv' '{tree}/a/one-again.csv'
            mkdir '{tree}/links'; ln -s ../a/one.csv '{tree}/links/to-one'
            ln -s '{tree}/a/b' '{tree}/absolute-to-b'
            mkdir '{tree}/bin'; ln -s /usr/bin/env '{tree}/bin/python'; ln -s ../../outside/of/tree '{tree}/bin/out'; ln -s no/such/file '{tree}/bin/dangling'
            mkdir '{tree}/sub'; ln -s .. '{tree}/sub/up'
            mkdir '{tree}/sub/deeper'; ln -s '../.././a//./one.csv' '{tree}/sub/deeper/odd'; ln -s './..//../a/b/' '{tree}/sub/deeper/trailing'
            touch -d '2001-02-03 04:05:06.123456789' '{tree}/a/one.csv' '{tree}/empty-dir'
            """);
        Assert.True(code == 0, output);
        return tree;
    }

    /// <summary>Every link below <paramref name="root"/> and its target exactly as stored (find's %l), in order.</summary>
    private static async Task<string> LinksOf(string root)
    {
        var (code, output) = await Shell($"cd '{root}' && find . -type l -printf '%p -> %l\n' | sort");
        Assert.True(code == 0, output);
        Assert.Contains("-> /usr/bin/env", output);
        return output;
    }

    [Fact]
    public async Task A_tree_staged_and_fetched_with_get_is_identical_links_compared_as_links()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var tree = await BuildTree(c.Root);
        var staged = await c.StageAsync(tree, "tree/everything");
        Assert.Equal(300_000 + 6 + 1 + 18, staged.RawBytes);     // the hard link's bytes once

        var copy = Path.Combine(c.Root, "copy");
        var (code, stdout, stderr) = await c.RunAsync("hpcdata", ["get", "tree/everything", copy, "--cache-hosts", c.HostList]);
        Assert.True(code == 0, stderr);
        Assert.Contains("verified", string.Join("\n", stdout));

        var (same, diff) = await Shell($"diff -r --no-dereference '{tree}' '{copy}'");
        Assert.True(same == 0, diff);
        Assert.Equal(await LinksOf(tree), await LinksOf(copy));
        Assert.Equal("../a/one.csv", new FileInfo(Path.Combine(copy, "links", "to-one")).LinkTarget);
        // Absolute, out of the tree, dangling: kept as written, as tar keeps them; the node resolves them as this host did.
        Assert.Equal($"{tree}/a/b", new FileInfo(Path.Combine(copy, "absolute-to-b")).LinkTarget);
        Assert.Equal("/usr/bin/env", new FileInfo(Path.Combine(copy, "bin", "python")).LinkTarget);
        Assert.Equal("../../outside/of/tree", new FileInfo(Path.Combine(copy, "bin", "out")).LinkTarget);
        Assert.Equal("no/such/file", new FileInfo(Path.Combine(copy, "bin", "dangling")).LinkTarget);
        Assert.Equal("..", new FileInfo(Path.Combine(copy, "sub", "up")).LinkTarget);
        // A link's text is data: "./", "..//" and a trailing "/" come back as they were written, not tidied.
        Assert.Equal("../.././a//./one.csv", new FileInfo(Path.Combine(copy, "sub", "deeper", "odd")).LinkTarget);
        Assert.Equal("./..//../a/b/", new FileInfo(Path.Combine(copy, "sub", "deeper", "trailing")).LinkTarget);
        var (_, links) = await Shell($"stat -c '%h %a' '{copy}/a/one.csv' '{copy}/a/one-again.csv' '{copy}/a/run.sh' '{copy}/a/b' && stat -c %i '{copy}/a/one.csv' '{copy}/a/one-again.csv' | uniq | wc -l");
        Assert.Equal(["2 644", "2 644", "1 750", "2 700", "1"], links.Trim().Split('\n').Select(l => l.Trim()).ToArray());
        Assert.Equal(File.GetLastWriteTimeUtc(Path.Combine(tree, "a/one.csv")), File.GetLastWriteTimeUtc(Path.Combine(copy, "a/one.csv")));
        Assert.Equal(Directory.GetLastWriteTimeUtc(Path.Combine(tree, "empty-dir")), Directory.GetLastWriteTimeUtc(Path.Combine(copy, "empty-dir")));

        var (again, _, refused) = await c.RunAsync("hpcdata", ["get", "tree/everything", copy, "--cache-hosts", c.HostList]);
        Assert.Equal(2, again);
        Assert.Contains("give --force", refused);
    }

    [Fact]
    public async Task On_the_node_a_directory_dataset_is_one_read_only_tree_identical_to_the_source_that_survives_a_restart_and_goes_on_eviction()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var tree = await BuildTree(c.Root);
        var staged = await c.StageAsync(tree, "tree/everything");
        var (agent, pipe, dataDir) = await c.StartAgentAsync();

        var (prepared, prepOut, prepErr) = await c.RunAsync("hpcdata", ["nodeprep", "tree/everything", "--job", "j1", "--pipe", pipe, "--no-start"]);
        Assert.True(prepared == 0, prepErr);
        var nodeTree = prepOut.Last().Split(' ').Single(f => f.StartsWith("path=", StringComparison.Ordinal))["path=".Length..];
        Assert.Equal(Path.Combine(dataDir, "complete", staged.Version), nodeTree);
        var (_, pathOut, pathErr) = await c.RunAsync("hpcdata", ["path", "tree/everything", "--pipe", pipe]);
        Assert.Equal(nodeTree, pathOut.Single());

        var (same, diff) = await Shell($"diff -r --no-dereference '{tree}' '{nodeTree}'");
        Assert.True(same == 0, diff);
        Assert.Equal(await LinksOf(tree), await LinksOf(nodeTree));
        Assert.Equal("../a/one.csv", new FileInfo(Path.Combine(nodeTree, "links", "to-one")).LinkTarget);
        Assert.Equal("../.././a//./one.csv", new FileInfo(Path.Combine(nodeTree, "sub", "deeper", "odd")).LinkTarget);
        Assert.Equal("./..//../a/b/", new FileInfo(Path.Combine(nodeTree, "sub", "deeper", "trailing")).LinkTarget);
        // One copy on the node: the tree is the copy (no concatenated file beside it), hard links share their inode.
        var (_, copies) = await Shell($"find '{dataDir}' -type f -size 300000c | wc -l; ls '{dataDir}/complete' '{dataDir}/partial'");
        Assert.Equal([ "1", $"{dataDir}/complete:", staged.Version, "", $"{dataDir}/partial:" ], copies.TrimEnd().Split('\n'));
        // Read-only for every reader: files lose write bits and keep execute (for all), directories r-x; times kept.
        var (_, modes) = await Shell($"cd '{nodeTree}' && stat -c '%n %h %a' a/one.csv a/one-again.csv a/run.sh a/b empty-dir . && stat -c %i a/one.csv a/one-again.csv | uniq | wc -l");
        var stats = modes.Trim().Split('\n').Select(l => l.Trim()).ToArray();
        Assert.Equal(["a/one.csv 2 444", "a/one-again.csv 2 444", "a/run.sh 1 555", "a/b 2 555", "empty-dir 2 555"], stats[..5]);
        // The root is the gate: by default only the staging user reads the dataset (r-x through an ACL; nothing for others).
        Assert.Matches("^\\. 8 5[05]0$", stats[5]);
        Assert.Equal("1", stats[6]);
        Assert.Equal(File.GetLastWriteTimeUtc(Path.Combine(tree, "a/one.csv")), File.GetLastWriteTimeUtc(Path.Combine(nodeTree, "a/one.csv")));
        Assert.Equal(Directory.GetLastWriteTimeUtc(Path.Combine(tree, "empty-dir")), Directory.GetLastWriteTimeUtc(Path.Combine(nodeTree, "empty-dir")));

        // The SDK maps the member it opens from the tree; the whole dataset still verifies against its hash.
        await using (var data = await Hpc.CommonData.Dataset.OpenAsync("tree/everything", Cluster.Via(pipe)))
        {
            Assert.Equal(Hpc.CommonData.DataAccessMode.Map, data.Mode);
            Assert.Equal(nodeTree, data.LocalPath);
            Assert.Equal(Path.Combine(nodeTree, "a", "b", "big.bin"), data.LocalPathOf("a/b/big.bin"));
            using (var member = data.OpenFile("links/to-one"))
                Assert.Equal("alpha\n", new StreamReader(member).ReadToEnd());
            var big = data.Files.Single(f => f.Path == "a/b/big.bin");
            Assert.Equal(File.ReadAllBytes(Path.Combine(tree, "a/b/big.bin")), data.GetSpan(big.Offset, (int)big.Length).ToArray());
            Assert.True(data.VerifyHash());
        }

        // hpcdata get on the node copies the tree out of the agent's mapping, each file from its own mapped member.
        var copy = Path.Combine(c.Root, "copy-from-node");
        var (got, gotOut, gotErr) = await c.RunAsync("hpcdata", ["get", "tree/everything", copy], new Dictionary<string, string?> { ["HPCDATA_AGENT_PIPE"] = pipe });
        Assert.True(got == 0, gotErr);
        Assert.Contains("via map", gotOut.Last());
        var (sameAgain, diffAgain) = await Shell($"diff -r --no-dereference '{tree}' '{copy}'");
        Assert.True(sameAgain == 0, diffAgain);
        Assert.Equal(await LinksOf(tree), await LinksOf(copy));

        // A restarted agent finds the tree, checks it whole on first use and serves it without fetching.
        await agent.DisposeAsync();
        (agent, _, _) = await c.StartAgentAsync(dataDir, pipe: pipe);
        var (again, againOut, againErr) = await c.RunAsync("hpcdata", ["nodeprep", "tree/everything", "--job", "j2", "--pipe", pipe, "--no-start"]);
        Assert.True(again == 0, againErr);
        Assert.Contains("source=local", againOut.Last());

        // Released and evicted: the tree goes, read-only directories and all.
        foreach (var job in new[] { "j1", "j2" })
        {
            var (released, _, releaseErr) = await c.RunAsync("hpcdata", ["noderelease", "tree/everything", "--job", job, "--pipe", pipe, "--evict", "--stop-agent", "never"]);
            Assert.True(released == 0, releaseErr);
        }
        Assert.False(Directory.Exists(nodeTree));
    }

    [Fact]
    public async Task A_tree_of_20000_files_opens_through_the_agent_with_its_whole_file_table()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var tree = Path.Combine(c.Root, "many");
        var (made, makeOutput) = await Shell($"mkdir -p '{tree}' && cd '{tree}' && for d in $(seq 0 19); do mkdir d$d; for f in $(seq 0 999); do echo $d.$f > d$d/f$f; done; done");
        Assert.True(made == 0, makeOutput);
        await c.StageAsync(tree, "tree/many");
        var (_, pipe, _) = await c.StartAgentAsync();

        // The reply describing it carries 20,000 entries (over a megabyte of JSON): more than a request may be.
        await using var data = await Hpc.CommonData.Dataset.OpenAsync("tree/many", Cluster.Via(pipe));
        Assert.Equal(20_000, data.Files.Count(f => f.IsFile));
        using (var member = data.OpenFile("d19/f999")) Assert.Equal("19.999\n", new StreamReader(member).ReadToEnd());
        Assert.Equal("7.123\n", File.ReadAllText(data.LocalPathOf("d7/f123")));
    }

    [Fact]
    public async Task A_Python_worker_reads_the_node_tree_through_HPCDATA_DATASET_PATH()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var source = Path.Combine(c.Root, "history");
        var (generated, _, genErr) = await c.RunAsync("hpcdata", ["generate", source, "--data", "history-files", "--size", "2MB", "--instruments", "20"]);
        Assert.True(generated == 0, genErr);
        await c.StageAsync(source, "risk/history");
        var (_, pipe, _) = await c.StartAgentAsync();
        var (found, pathOut, pathErr) = await c.RunAsync("hpcdata", ["path", "risk/history", "--pipe", pipe]);
        Assert.True(found == 0, pathErr);

        var reader = Path.Combine(Cluster.RepositoryRoot, "samples", "python", "history_reader.py");
        var (code, output) = await Shell($"HPCDATA_DATASET_PATH='{pathOut.Single()}' python3 '{reader}'");
        Assert.True(code == 0, output);
        var result = JsonDocument.Parse(output).RootElement;
        Assert.Equal(pathOut.Single(), result.GetProperty("tree").GetString());

        // What the Python worker saw is what was staged: every file, every row, each instrument's last close.
        var files = Directory.GetFiles(source, "*.csv");
        var rows = files.Select(f => File.ReadAllLines(f).Skip(1).Where(l => l.Length > 0).ToArray()).ToArray();
        Assert.Equal(files.Length, result.GetProperty("files").GetInt32());
        Assert.Equal(rows.Sum(r => r.Length), result.GetProperty("rows").GetInt32());
        foreach (var last in rows.Select(r => r[^1].Split(',')))
            Assert.Equal(double.Parse(last[2], System.Globalization.CultureInfo.InvariantCulture), result.GetProperty("last_close").GetProperty(last[1]).GetDouble());
    }

    [Fact]
    public async Task Links_out_of_the_tree_are_kept_never_followed_and_fifos_are_skipped_with_a_warning()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var tree = Path.Combine(c.Root, "odd");
        var outside = Path.Combine(c.Root, "outside");
        var (code, output) = await Shell($"""
            set -e
            mkdir -p '{tree}' '{outside}'
            printf 'secret' > '{outside}/secret'
            printf 'data' > '{tree}/data'
            ln -s '{outside}' '{tree}/etc'
            ln -s ../outside/secret '{tree}/peek'
            mkfifo '{tree}/pipe'
            """);
        Assert.True(code == 0, output);

        var (staged, stdout, stderr) = await c.RunAsync("Hpc.Stager", [tree, "--name", "tree/odd", "--cache-hosts", c.HostList, "--json"]);
        Assert.True(staged == 0, stderr);
        Assert.DoesNotContain("skipping the link", stderr);
        Assert.Contains("skipping 'pipe': a fifo is not data", stderr);
        // The links are stored as links: what lies outside the tree is not read, so only the tree's own 4 bytes are staged.
        Assert.Equal(4, JsonDocument.Parse(stdout.Last()).RootElement.GetProperty("rawBytes").GetInt64());

        // On the node the links stand as they were; a worker's SDK follows none of them out of the tree.
        var (agent, pipe, _) = await c.StartAgentAsync();
        var (prepared, prepOut, prepErr) = await c.RunAsync("hpcdata", ["nodeprep", "tree/odd", "--job", "j1", "--pipe", pipe, "--no-start"]);
        Assert.True(prepared == 0, prepErr);
        var nodeTree = prepOut.Last().Split(' ').Single(f => f.StartsWith("path=", StringComparison.Ordinal))["path=".Length..];
        Assert.Equal(outside, new FileInfo(Path.Combine(nodeTree, "etc")).LinkTarget);
        Assert.Equal("../outside/secret", new FileInfo(Path.Combine(nodeTree, "peek")).LinkTarget);
        await using var data = await Hpc.CommonData.Dataset.OpenAsync("tree/odd", Cluster.Via(pipe));
        var refused = Assert.Throws<FileNotFoundException>(() => data.OpenFile("peek"));
        Assert.Contains("is a link to '../outside/secret', outside the dataset", refused.Message);
        using (var member = data.OpenFile("data")) Assert.Equal("data", new StreamReader(member).ReadToEnd());
    }

    [Fact]
    public async Task A_python_environment_staged_as_a_dataset_runs_from_the_node_copy_with_its_own_packages()
    {
        if (!OperatingSystem.IsLinux()) return;
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        // A virtual environment as a site builds one: its interpreter is an absolute link to the system's, its packages
        // are its own. The source is gone before the job runs, so only the node's copy can answer.
        var env = Path.Combine(c.Root, "env");
        var (built, output) = await Shell($"""
            set -e
            /usr/bin/python3 -m venv --without-pip '{env}'
            site=$('{env}/bin/python' -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
            mkdir -p "$site/riskkit"
            printf 'VALUE = 42\n' > "$site/riskkit/__init__.py"
            """);
        Assert.True(built == 0, output);
        Assert.StartsWith("/", new FileInfo(Path.Combine(env, "bin", "python3")).LinkTarget);
        await c.StageAsync(env, "env/risk");
        Directory.Delete(env, recursive: true);

        var (agent, pipe, _) = await c.StartAgentAsync();
        var (prepared, prepOut, prepErr) = await c.RunAsync("hpcdata", ["nodeprep", "env/risk", "--job", "j1", "--pipe", pipe, "--no-start"]);
        Assert.True(prepared == 0, prepErr);
        var nodeTree = prepOut.Last().Split(' ').Single(f => f.StartsWith("path=", StringComparison.Ordinal))["path=".Length..];

        var (ran, imported) = await Shell($"'{nodeTree}/bin/python' -c 'import riskkit, sys; print(riskkit.VALUE); print(riskkit.__file__); print(sys.prefix)'");
        Assert.True(ran == 0, imported);
        var lines = imported.Trim().Split('\n');
        Assert.Equal("42", lines[0]);
        Assert.StartsWith(nodeTree + "/lib/", lines[1]);
        Assert.Equal(nodeTree, lines[2]);
    }

    [Fact]
    public async Task A_name_that_is_not_UTF_8_is_refused_naming_the_file_before_anything_is_sent()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var tree = Path.Combine(c.Root, "names");
        var (code, output) = await Shell($"mkdir -p '{tree}' && printf x > '{tree}/ok' && printf y > \"{tree}/$(printf 'bad\\377')\"");
        Assert.True(code == 0, output);

        var (refused, _, stderr) = await c.RunAsync("Hpc.Stager", [tree, "--name", "tree/names", "--cache-hosts", c.HostList]);
        Assert.NotEqual(0, refused);
        Assert.Contains("is not valid UTF-8", stderr);
        await using var tier = c.Tier();
        Assert.Empty((await tier.KeysAsync(Hpc.CommonData.Cache.CacheKeys.SegmentPrefix)).SelectMany(k => k));
    }
}
