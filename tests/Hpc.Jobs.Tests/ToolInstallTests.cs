using System.Diagnostics;

namespace Hpc.Jobs.Tests;

/// <summary>
/// One install gives a machine everything: hpcdata packed as a .NET tool from this build, installed from that local
/// package into a fresh directory (no other package source, no network), runs the whole demo — cache hosts, node
/// agents, stager and sample workers all started from the installed tool, none from the build tree.
/// </summary>
public sealed class ToolInstallTests
{
    /// <summary>One scale-model run as <c>hpcdata bench cluster</c> records it.</summary>
    private const string ClusterResult =
        """{"kind":"cluster","schema":1,"run":"r1","config":{"nodes":2,"hosts":1,"sizeBytes":16777216,"rateMbit":100,"compress":true},"dataset":{"version":"v","rawBytes":16777216,"storedBytes":6000000,"segments":256,"stageSeconds":1.2},"limitSeconds":0.96,"measuredSeconds":1.2,"efficiency":0.8,"nodes":[{"node":"node1","wallSeconds":1.1,"fetchSeconds":1.0,"bytes":16777216},{"node":"node2","wallSeconds":1.2,"fetchSeconds":1.1,"bytes":16777216}]}""";

    public static string RepositoryRoot()
    {
        for (var dir = new DirectoryInfo(AppContext.BaseDirectory); dir is not null; dir = dir.Parent)
            if (File.Exists(Path.Combine(dir.FullName, "Hpc.sln"))) return dir.FullName;
        throw new InvalidOperationException("not run from a build of the repository");
    }

    private sealed record Run(int Code, string Output);

    private static async Task<Run> RunAsync(string program, IEnumerable<string> args, string workingDirectory, IDictionary<string, string> env, TimeSpan timeout)
    {
        var info = new ProcessStartInfo(program) { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false, WorkingDirectory = workingDirectory };
        foreach (var a in args) info.ArgumentList.Add(a);
        foreach (var (k, v) in env) info.Environment[k] = v;
        using var p = Process.Start(info)!;
        var stdout = p.StandardOutput.ReadToEndAsync();
        var stderr = p.StandardError.ReadToEndAsync();
        try
        {
            await p.WaitForExitAsync().WaitAsync(timeout);
        }
        catch (TimeoutException)
        {
            p.Kill(entireProcessTree: true);
            await p.WaitForExitAsync();
            Assert.Fail($"{program} {string.Join(' ', args)} took longer than {timeout.TotalMinutes:0} min:\n{await stdout}\n{await stderr}");
        }
        return new Run(p.ExitCode, await stdout + await stderr);
    }

    /// <summary>The SDK packages say what a package feed and a debugger need: licence, readme, source commit, symbols.</summary>
    [Fact]
    public async Task The_sdk_packages_carry_licence_readme_repository_and_symbols()
    {
        var root = RepositoryRoot();
        var configuration = new DirectoryInfo(AppContext.BaseDirectory.TrimEnd('/')).Name switch { "release" => "Release", "debug" => "Debug", var other => other };
        var output = Path.Combine(Path.GetTempPath(), $"hcd-sdkpack-{Environment.ProcessId}-{Guid.NewGuid():N}"[..40]);
        try
        {
            foreach (var (project, id) in new[] { ("sdk/Core/Hpc.CommonData.Core.csproj", "Hpc.CommonData.Core"), ("sdk/Worker/Hpc.CommonData.csproj", "Hpc.CommonData") })
            {
                var pack = await RunAsync("dotnet", ["pack", Path.Combine(root, project), "-c", configuration, "--no-build", "--no-restore", "-o", output],
                    root, new Dictionary<string, string> { ["DOTNET_NOLOGO"] = "1" }, TimeSpan.FromMinutes(3));
                Assert.True(pack.Code == 0, pack.Output);
                var package = Assert.Single(Directory.GetFiles(output, $"{id}.*.nupkg"), f => !f.EndsWith(".snupkg") && Path.GetFileName(f)[id.Length + 1] is >= '0' and <= '9');
                Assert.True(File.Exists(Path.ChangeExtension(package, ".snupkg")), $"no symbols package beside {package}");
                using var zip = System.IO.Compression.ZipFile.OpenRead(package);
                var nuspec = System.Xml.Linq.XDocument.Load(zip.GetEntry($"{id}.nuspec")!.Open());
                var metadata = nuspec.Root!.Elements().Single(e => e.Name.LocalName == "metadata");
                string? Meta(string name) => metadata.Elements().FirstOrDefault(e => e.Name.LocalName == name)?.Value;
                Assert.Equal("MIT", Meta("license"));
                Assert.Equal("README.md", Meta("readme"));
                Assert.NotNull(zip.GetEntry("README.md"));
                Assert.Matches("^[0-9a-f]{40}$", metadata.Elements().Single(e => e.Name.LocalName == "repository").Attribute("commit")!.Value);
                Assert.Contains(zip.Entries, e => e.FullName == $"lib/net10.0/{id}.xml");   // IntelliSense docs
            }
        }
        finally
        {
            try { Directory.Delete(output, recursive: true); } catch (IOException) { }
        }
    }

    /// <summary>
    /// README's pack (no --no-build) once failed with CS0234 — hpcdata compiled without its project references — and
    /// left the folder of published programs such that a later --no-build pack lost the daemons' runtime configurations.
    /// </summary>
    [Fact]
    public async Task A_pack_that_builds_and_a_no_build_pack_after_it_both_carry_every_program()
    {
        if (OperatingSystem.IsWindows()) return;
        var root = RepositoryRoot();
        var configuration = new DirectoryInfo(AppContext.BaseDirectory.TrimEnd('/')).Name switch { "release" => "Release", "debug" => "Debug", var other => other };
        var work = Path.Combine(Path.GetTempPath(), $"hcd-packs-{Environment.ProcessId}-{Guid.NewGuid():N}"[..40]);
        var env = new Dictionary<string, string> { ["DOTNET_CLI_TELEMETRY_OPTOUT"] = "1", ["DOTNET_NOLOGO"] = "1" };
        try
        {
            foreach (var (output, noBuild) in new[] { (Path.Combine(work, "built"), false), (Path.Combine(work, "no-build"), true) })
            {
                string[] args = ["pack", Path.Combine(root, "jobs", "Hpc.Jobs.csproj"), "-c", configuration, "--no-restore", "-o", output, .. (noBuild ? new[] { "--no-build" } : [])];
                var pack = await RunAsync("dotnet", args, root, env, TimeSpan.FromMinutes(5));
                Assert.True(pack.Code == 0, $"dotnet {string.Join(' ', args)}:\n{pack.Output}");
                // Each file once: NuGet warns (NU5118) for every copy of a path it drops.
                Assert.DoesNotContain("warning NU", pack.Output);
                using var zip = System.IO.Compression.ZipFile.OpenRead(Assert.Single(Directory.GetFiles(output, "hpcdata.*.nupkg")));
                var entries = zip.Entries.Select(e => e.FullName).ToHashSet();
                foreach (var program in new[] { "hpcdata", "Hpc.NodeAgent", "Hpc.CacheHost", "Hpc.Stager", "Hpc.Samples" })
                {
                    foreach (var file in new[] { ".dll", ".runtimeconfig.json", ".deps.json" })
                        Assert.True(entries.Contains($"tools/net10.0/any/{program}{file}"), $"{program}{file} is not in the package packed {(noBuild ? "with" : "without")} --no-build");
                    // Every library of ours a program loads travels with it (hpcdata once went without Hpc.Mpi.dll).
                    using var deps = System.Text.Json.JsonDocument.Parse(zip.GetEntry($"tools/net10.0/any/{program}.deps.json")!.Open());
                    foreach (var library in deps.RootElement.GetProperty("libraries").EnumerateObject())
                        if (library.Value.GetProperty("type").GetString() == "project" && library.Name.Split('/')[0] is var name && name != program)
                            Assert.True(entries.Contains($"tools/net10.0/any/{name}.dll"),
                                $"{name}.dll, which {program} loads, is not in the package packed {(noBuild ? "with" : "without")} --no-build");
                }
            }
        }
        finally
        {
            try { Directory.Delete(work, recursive: true); } catch (IOException) { }
        }
    }

    [Fact]
    public async Task The_tool_installed_from_its_package_into_a_fresh_directory_runs_the_demo()
    {
        if (OperatingSystem.IsWindows()) return;
        var root = RepositoryRoot();
        // The configuration this test was built in is the one packed (artifacts/bin/<project>/<config>/).
        var configuration = new DirectoryInfo(AppContext.BaseDirectory.TrimEnd('/')).Name switch { "release" => "Release", "debug" => "Debug", var other => other };
        var work = Path.Combine(Path.GetTempPath(), $"hcd-tool-{Environment.ProcessId}-{Guid.NewGuid():N}"[..40]);
        var (packages, tools, cache, elsewhere) = (Path.Combine(work, "packages"), Path.Combine(work, "tools"), Path.Combine(work, "nuget"), Path.Combine(work, "cwd"));
        Directory.CreateDirectory(packages);
        Directory.CreateDirectory(elsewhere);
        // A private package cache: an hpcdata 1.0.0 extracted by an earlier run must not stand in for this build's.
        var env = new Dictionary<string, string> { ["NUGET_PACKAGES"] = cache, ["DOTNET_CLI_TELEMETRY_OPTOUT"] = "1", ["DOTNET_NOLOGO"] = "1", ["HPCDATA_BIN"] = "" };
        try
        {
            var pack = await RunAsync("dotnet", ["pack", Path.Combine(root, "jobs", "Hpc.Jobs.csproj"), "-c", configuration, "--no-build", "--no-restore", "-o", packages],
                root, env, TimeSpan.FromMinutes(5));
            Assert.True(pack.Code == 0, pack.Output);
            var package = Assert.Single(Directory.GetFiles(packages, "hpcdata.*.nupkg"));
            var version = Path.GetFileNameWithoutExtension(package)["hpcdata.".Length..];

            var config = Path.Combine(work, "nuget.config");
            await File.WriteAllTextAsync(config, $"""
                <?xml version="1.0" encoding="utf-8"?>
                <configuration><packageSources><clear /><add key="local" value="{packages}" /></packageSources></configuration>
                """);
            var install = await RunAsync("dotnet", ["tool", "install", "--tool-path", tools, "--configfile", config, "hpcdata", "--version", version],
                elsewhere, env, TimeSpan.FromMinutes(3));
            Assert.True(install.Code == 0, install.Output);

            var hpcdata = Path.Combine(tools, "hpcdata");
            // The programs hpcdata starts sit in the installed package itself, not in this build.
            var installed = Directory.GetFiles(Path.Combine(tools, ".store"), "hpcdata.dll", SearchOption.AllDirectories).Select(Path.GetDirectoryName).Single()!;
            foreach (var program in new[] { "Hpc.NodeAgent", "Hpc.CacheHost", "Hpc.Stager", "Hpc.Samples" })
            {
                Assert.True(File.Exists(Path.Combine(installed, program + ".dll")), $"{program}.dll is not in the installed tool");
                Assert.True(File.Exists(Path.Combine(installed, program + ".runtimeconfig.json")), $"{program}.runtimeconfig.json is not in the installed tool");
            }
            // What nodes install carries no lab, but the throughput report with its charts is the tool's own.
            Assert.False(File.Exists(Path.Combine(installed, "Hpc.Bench.dll")), "the lab is in the installed tool");
            var results = Directory.CreateDirectory(Path.Combine(work, "results")).FullName;
            File.WriteAllText(Path.Combine(results, "results.jsonl"), ClusterResult + "\n");
            var report = await RunAsync(hpcdata, ["report", results], elsewhere, env, TimeSpan.FromMinutes(2));
            Assert.True(report.Code == 0, report.Output);
            Assert.True(File.Exists(Path.Combine(results, "report.md")), report.Output);
            Assert.Contains("time-vs-nodes.svg", Directory.GetFiles(results, "*.svg").Select(Path.GetFileName));
            // The charts are the report's own SVG: no graphics library travels with the tool, for any platform.
            Assert.Empty(Directory.GetFiles(installed, "*Skia*", SearchOption.AllDirectories));
            Assert.Empty(Directory.GetFiles(installed, "*HarfBuzz*", SearchOption.AllDirectories));
            // The native hpcdata a Release package carries draws the same charts, and needs nothing beside it to do so.
            var nativeDir = Path.Combine(installed, "native");
            foreach (var native in Directory.Exists(nativeDir) ? Directory.GetFiles(nativeDir, "hpcdata", SearchOption.AllDirectories) : [])
            {
                var alone = Directory.CreateDirectory(Path.Combine(work, "alone")).FullName;
                File.Copy(native, Path.Combine(alone, "hpcdata"));
                File.SetUnixFileMode(Path.Combine(alone, "hpcdata"), File.GetUnixFileMode(native));
                foreach (var chart in Directory.GetFiles(results, "*.svg")) File.Delete(chart);
                File.Delete(Path.Combine(results, "report.md"));
                var nativeReport = await RunAsync(Path.Combine(alone, "hpcdata"), ["report", results], elsewhere, env, TimeSpan.FromMinutes(2));
                Assert.True(nativeReport.Code == 0, $"{native} report:\n{nativeReport.Output}");
                Assert.True(File.Exists(Path.Combine(results, "report.md")), nativeReport.Output);
                Assert.Contains("time-vs-nodes.svg", Directory.GetFiles(results, "*.svg").Select(Path.GetFileName));
                Assert.DoesNotContain("warning", nativeReport.Output);
            }
            var help = await RunAsync(hpcdata, ["--help"], elsewhere, env, TimeSpan.FromMinutes(1));
            Assert.Contains("agent", help.Output);
            Assert.Contains("cache-host", help.Output);
            // The lab is not in the package: the installed tool does not offer a command it cannot run.
            Assert.DoesNotContain("\n  bench ", help.Output);
            var versionLine = await RunAsync(hpcdata, ["--version"], elsewhere, env, TimeSpan.FromMinutes(1));
            Assert.Matches(@"^hpcdata \d+\.\d+\.\d+\+[0-9a-f]{7,40}\s*$", versionLine.Output);
            var agentHelp = await RunAsync(hpcdata, ["agent", "--help"], elsewhere, env, TimeSpan.FromMinutes(1));
            Assert.True(agentHelp.Code == 0 && agentHelp.Output.Contains("--data-dir"), agentHelp.Output);

            var demo = await RunAsync(hpcdata, ["demo", "--size", "8MB", "--nodes", "2", "--workers", "2", "--work-dir", Path.Combine(work, "demo")],
                elsewhere, env, TimeSpan.FromMinutes(4));
            Assert.True(demo.Code == 0, demo.Output);
            Assert.Contains("all 4 computing workers agree", demo.Output);
            Assert.DoesNotContain(Path.Combine(root, "artifacts"), demo.Output);
        }
        finally
        {
            try { Directory.Delete(work, recursive: true); } catch (IOException) { } catch (UnauthorizedAccessException) { }
        }
    }
}
