using Hpc.CommonData.Hosting;

namespace Hpc.CommonData.Tests;

/// <summary>Which file of an installed folder is the program to start, and how.</summary>
public sealed class ComponentLocatorTests : IDisposable
{
    private readonly string _dir = Directory.CreateTempSubdirectory("hcd-locator-").FullName;
    private static readonly string Native = OperatingSystem.IsWindows() ? "Hpc.Stager.exe" : "Hpc.Stager";

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    private string Touch(string name)
    {
        var path = Path.Combine(_dir, name);
        File.WriteAllText(path, "");
        return path;
    }

    [Fact]
    public void The_assembly_is_started_through_dotnet_even_when_an_apphost_sits_beside_it()
    {
        var dll = Touch("Hpc.Stager.dll");
        Touch(Native);
        Touch("Hpc.Stager.runtimeconfig.json");
        Assert.Equal(dll, ComponentLocator.FindIn(_dir, "Hpc.Stager"));
        Assert.False(ComponentLocator.IsNative(dll));
    }

    [Fact]
    public void A_native_executable_with_no_runtime_configuration_is_started_directly()
    {
        var native = Touch(Native);
        Assert.Equal(native, ComponentLocator.FindIn(_dir, "Hpc.Stager"));
        Assert.True(ComponentLocator.IsNative(native));
    }

    [Fact]
    public void An_apphost_without_its_assembly_is_not_a_program()
    {
        // A build copies referenced programs' apphost and runtime configuration into the referencing project's output.
        Touch(Native);
        Touch("Hpc.Stager.runtimeconfig.json");
        Assert.Null(ComponentLocator.FindIn(_dir, "Hpc.Stager"));
        Assert.Null(ComponentLocator.FindIn(_dir, "Hpc.CacheHost"));
    }

    /// <summary>A build tree: the Release build's assembly of a program, and its native build under artifacts/publish.</summary>
    private (string Dll, string Native) BuildTree(string referencingProject = "Hpc.Stager")
    {
        var bin = Directory.CreateDirectory(Path.Combine(_dir, "artifacts", "bin", referencingProject, "release")).FullName;
        var dll = Path.Combine(bin, "Hpc.Stager.dll");
        File.WriteAllText(dll, "");
        File.WriteAllText(Path.Combine(bin, "Hpc.Stager.runtimeconfig.json"), "");
        var publish = Directory.CreateDirectory(Path.Combine(_dir, "artifacts", "publish", "Hpc.Stager",
            "release_" + System.Runtime.InteropServices.RuntimeInformation.RuntimeIdentifier)).FullName;
        return (dll, Path.Combine(publish, Native));
    }

    [Theory]
    [InlineData("Hpc.Stager")]
    [InlineData("Hpc.Stager.Tests")] // the newest copy of the assembly sat in a test project's output
    public void In_a_build_tree_the_native_build_of_a_program_is_started_when_it_is_as_new_as_its_assembly(string referencingProject)
    {
        var (dll, native) = BuildTree(referencingProject);
        File.WriteAllText(native, "");
        File.SetLastWriteTimeUtc(dll, DateTime.UtcNow.AddMinutes(-1));
        Assert.Equal(native, ComponentLocator.NativeBuildOf(dll, "Hpc.Stager"));
    }

    [Fact]
    public void On_a_CPU_with_AVX_512_the_wide_vector_build_is_started_and_elsewhere_the_default_one()
    {
        var (dll, native) = BuildTree();
        File.WriteAllText(native, "");
        var wide = Path.Combine(Directory.CreateDirectory(Path.GetDirectoryName(native) + "_" + ComponentLocator.WideVectorLevel).FullName, Native);
        File.WriteAllText(wide, "");
        File.SetLastWriteTimeUtc(dll, DateTime.UtcNow.AddMinutes(-1));
        Assert.Equal(wide, ComponentLocator.NativeBuildOf(dll, "Hpc.Stager", wideVectors: true));
        Assert.Equal(native, ComponentLocator.NativeBuildOf(dll, "Hpc.Stager", wideVectors: false));
        // A stale wide build (older than the assembly) is passed over for the default one.
        File.SetLastWriteTimeUtc(wide, DateTime.UtcNow.AddMinutes(-2));
        Assert.Equal(native, ComponentLocator.NativeBuildOf(dll, "Hpc.Stager", wideVectors: true));
    }

    [Fact]
    public void An_installed_folder_runs_its_wide_vector_build_only_on_a_CPU_that_has_AVX_512()
    {
        Touch("Hpc.Stager.dll");
        Touch("Hpc.Stager.runtimeconfig.json");
        var native = Path.Combine(Directory.CreateDirectory(ComponentLocator.NativeFolder(_dir)).FullName, Native);
        var wide = Path.Combine(Directory.CreateDirectory(Path.Combine(ComponentLocator.NativeFolder(_dir), ComponentLocator.WideVectorLevel)).FullName, Native);
        foreach (var file in new[] { native, wide })
        {
            File.WriteAllText(file, "");
            if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(file, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute);
        }
        Assert.Equal(wide, ComponentLocator.FindIn(_dir, "Hpc.Stager", wideVectors: true));
        Assert.Equal(native, ComponentLocator.FindIn(_dir, "Hpc.Stager", wideVectors: false));
    }

    [Fact]
    public void A_native_build_older_than_the_assembly_is_stale_and_not_started()
    {
        var (dll, native) = BuildTree();
        File.WriteAllText(native, "");
        File.SetLastWriteTimeUtc(native, DateTime.UtcNow.AddMinutes(-1));
        Assert.Null(ComponentLocator.NativeBuildOf(dll, "Hpc.Stager"));
    }

    [Fact]
    public void Where_the_build_had_no_clang_its_ReadyToRun_publish_is_started_through_dotnet_and_a_native_build_wins_when_there_is_one()
    {
        var (dll, native) = BuildTree();
        var precompiledDir = Directory.CreateDirectory(Path.GetDirectoryName(native) + "_" + ComponentLocator.ReadyToRunPivot).FullName;
        var precompiled = Path.Combine(precompiledDir, "Hpc.Stager.dll");
        File.WriteAllText(precompiled, "");
        File.WriteAllText(Path.Combine(precompiledDir, "Hpc.Stager.runtimeconfig.json"), "");
        File.SetLastWriteTimeUtc(dll, DateTime.UtcNow.AddMinutes(-1));
        Assert.Equal(precompiled, ComponentLocator.NativeBuildOf(dll, "Hpc.Stager"));
        Assert.False(ComponentLocator.IsNative(precompiled));

        File.WriteAllText(native, "");
        Assert.Equal(native, ComponentLocator.NativeBuildOf(dll, "Hpc.Stager"));
        // A stale one (older than the assembly) is never started.
        File.Delete(native);
        File.SetLastWriteTimeUtc(precompiled, DateTime.UtcNow.AddMinutes(-2));
        Assert.Null(ComponentLocator.NativeBuildOf(dll, "Hpc.Stager"));
    }

    [Fact]
    public void The_build_kind_of_a_program_is_read_from_its_file()
    {
        Assert.Equal("native", ComponentLocator.BuildKind(Path.Combine(_dir, Native)));
        // This test assembly is compiled by the JIT; the runtime's own libraries ship ReadyToRun.
        Assert.Equal("JIT", ComponentLocator.BuildKind(typeof(ComponentLocatorTests).Assembly.Location));
        Assert.Equal("ReadyToRun", ComponentLocator.BuildKind(typeof(object).Assembly.Location));
    }

    [Fact]
    public void A_framework_dependent_publish_is_not_taken_for_a_native_build()
    {
        var (dll, native) = BuildTree();
        File.WriteAllText(native, "");
        File.WriteAllText(Path.Combine(Path.GetDirectoryName(native)!, "Hpc.Stager.runtimeconfig.json"), "");
        Assert.Null(ComponentLocator.NativeBuildOf(dll, "Hpc.Stager"));
        Assert.Null(ComponentLocator.NativeBuildOf(Touch("Hpc.Stager.dll"), "Hpc.Stager")); // not under artifacts/bin at all
    }

    [Fact]
    public void An_installed_native_build_for_this_platform_is_started_in_place_of_the_assembly_beside_it()
    {
        Touch("Hpc.Stager.dll");
        Touch("Hpc.Stager.runtimeconfig.json");
        var native = Path.Combine(Directory.CreateDirectory(ComponentLocator.NativeFolder(_dir)).FullName, Native);
        File.WriteAllText(native, "");
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(native, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute);
        Assert.Equal(native, ComponentLocator.FindIn(_dir, "Hpc.Stager"));
        Assert.True(ComponentLocator.IsNative(native));
    }

    [Fact]
    public void A_native_build_this_user_may_not_run_leaves_the_assembly_to_be_started()
    {
        if (OperatingSystem.IsWindows()) return;
        var dll = Touch("Hpc.Stager.dll");
        var native = Path.Combine(Directory.CreateDirectory(ComponentLocator.NativeFolder(_dir)).FullName, Native);
        File.WriteAllText(native, "");
        File.SetUnixFileMode(native, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        Assert.Equal(dll, ComponentLocator.FindIn(_dir, "Hpc.Stager"));
    }

    [Fact]
    public void Run_by_root_a_native_build_only_root_may_run_is_made_runnable_by_every_user()
    {
        if (OperatingSystem.IsWindows() || !Environment.IsPrivilegedProcess) return;
        Touch("Hpc.Stager.dll");
        var native = Path.Combine(Directory.CreateDirectory(ComponentLocator.NativeFolder(_dir)).FullName, Native);
        File.WriteAllText(native, "");
        // What a root `dotnet tool install` leaves: rwxr--r--.
        File.SetUnixFileMode(native, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute | UnixFileMode.GroupRead | UnixFileMode.OtherRead);

        Assert.Equal(native, ComponentLocator.FindIn(_dir, "Hpc.Stager"));

        var mode = File.GetUnixFileMode(native);
        Assert.True((mode & UnixFileMode.OtherExecute) != 0 && (mode & UnixFileMode.GroupExecute) != 0, $"mode {mode}");
    }

    /// <summary>A program's assembly with <paramref name="bytes"/> in a project's output of the build tree, written at <paramref name="when"/>.</summary>
    private string Built(string project, string assembly, string bytes, DateTime when)
    {
        var bin = Directory.CreateDirectory(Path.Combine(_dir, "artifacts", "bin", project, "release")).FullName;
        var dll = Path.Combine(bin, assembly + ".dll");
        File.WriteAllText(dll, bytes);
        File.WriteAllText(Path.Combine(bin, assembly + ".runtimeconfig.json"), "{}");
        File.SetLastWriteTimeUtc(dll, when);
        return dll;
    }

    [Fact]
    public void In_a_build_tree_the_programs_own_output_is_named_when_a_newer_copy_elsewhere_is_the_same_build()
    {
        var at = new DateTime(2026, 11, 26, 12, 0, 0, DateTimeKind.Utc);
        var own = Built("Hpc.NodeAgent", "Hpc.NodeAgent", "build 2", at);
        var copy = Built("Hpc.NodeAgent.Tests", "Hpc.NodeAgent", "build 2", at.AddSeconds(3));   // copied later by the test project's build
        Assert.Equal(own, ComponentLocator.NewestBuilt([copy, own], "Hpc.NodeAgent"));

        var jobs = Built("Hpc.Jobs", "hpcdata", "tool", at);
        var jobsCopy = Built("Hpc.Jobs.Tests", "hpcdata", "tool", at.AddSeconds(1));
        Assert.Equal(jobs, ComponentLocator.NewestBuilt([jobsCopy, jobs], "hpcdata"));
    }

    [Fact]
    public void In_a_build_tree_a_newer_different_build_in_another_output_is_still_the_one_run()
    {
        var at = new DateTime(2026, 11, 26, 12, 0, 0, DateTimeKind.Utc);
        var own = Built("Hpc.NodeAgent", "Hpc.NodeAgent", "build 1", at);
        var newer = Built("Hpc.NodeAgent.Tests", "Hpc.NodeAgent", "build 2, rebuilt", at.AddMinutes(5));
        Assert.Equal(newer, ComponentLocator.NewestBuilt([own, newer], "Hpc.NodeAgent"));
        Assert.Null(ComponentLocator.NewestBuilt([Path.Combine(_dir, "nowhere", "Hpc.NodeAgent.dll")], "Hpc.NodeAgent"));
    }

    private static readonly string Hpcdata = OperatingSystem.IsWindows() ? "hpcdata.exe" : "hpcdata";

    private static string Executable(string path)
    {
        File.WriteAllText(path, "");
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(path, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute);
        return path;
    }

    [Theory]
    [InlineData("Hpc.CacheHost")]
    [InlineData("Hpc.NodeAgent")]
    [InlineData("Hpc.Stager")]
    public void An_installed_native_hpcdata_runs_the_daemons_compiled_into_it_with_the_programs_name_after_it(string assembly)
    {
        Touch(assembly + ".dll");
        Touch(assembly + ".runtimeconfig.json");
        var hpcdata = Executable(Path.Combine(Directory.CreateDirectory(ComponentLocator.NativeFolder(_dir)).FullName, Hpcdata));
        var wide = Executable(Path.Combine(Directory.CreateDirectory(Path.Combine(ComponentLocator.NativeFolder(_dir), ComponentLocator.WideVectorLevel)).FullName, Hpcdata));
        Assert.Equal(wide, ComponentLocator.FindIn(_dir, assembly, wideVectors: true));
        Assert.Equal(hpcdata, ComponentLocator.FindIn(_dir, assembly, wideVectors: false));
        Assert.Equal([hpcdata, assembly], ComponentLocator.CommandFor(hpcdata, assembly));
        // hpcdata itself is started without a program's name, and a program that is not compiled into it is not found there.
        Assert.Equal([hpcdata], ComponentLocator.CommandFor(hpcdata, "hpcdata"));
        Assert.Null(ComponentLocator.FindIn(_dir, "Hpc.Samples", wideVectors: false));
    }

    [Fact]
    public void A_programs_own_native_build_is_preferred_to_the_hpcdata_that_carries_it()
    {
        var folder = Directory.CreateDirectory(ComponentLocator.NativeFolder(_dir)).FullName;
        Executable(Path.Combine(folder, Hpcdata));
        var own = Executable(Path.Combine(folder, Native));
        Assert.Equal(own, ComponentLocator.FindIn(_dir, "Hpc.Stager", wideVectors: false));
        Assert.Equal([own], ComponentLocator.CommandFor(own, "Hpc.Stager"));
    }

    [Fact]
    public void A_folder_of_native_programs_runs_the_daemons_through_its_native_hpcdata_but_not_through_an_apphost()
    {
        var hpcdata = Touch(Hpcdata);
        Assert.Equal(hpcdata, ComponentLocator.FindIn(_dir, "Hpc.NodeAgent", wideVectors: false));
        // An ordinary build's apphost has its runtime configuration beside it: it is the portable hpcdata, which carries none.
        Touch("hpcdata.runtimeconfig.json");
        Assert.Null(ComponentLocator.FindIn(_dir, "Hpc.NodeAgent", wideVectors: false));
    }

    [Fact]
    public void In_a_build_tree_a_daemon_without_a_native_build_of_its_own_runs_in_hpcdatas_when_that_is_as_new()
    {
        var (dll, native) = BuildTree();
        var publish = Directory.CreateDirectory(Path.Combine(_dir, "artifacts", "publish", "Hpc.Jobs",
            "release_" + System.Runtime.InteropServices.RuntimeInformation.RuntimeIdentifier)).FullName;
        var hpcdata = Path.Combine(publish, Hpcdata);
        File.WriteAllText(hpcdata, "");
        File.SetLastWriteTimeUtc(dll, DateTime.UtcNow.AddMinutes(-1));
        Assert.Equal(hpcdata, ComponentLocator.NativeBuildOf(dll, "Hpc.Stager", wideVectors: false));
        File.WriteAllText(native, "");
        Assert.Equal(native, ComponentLocator.NativeBuildOf(dll, "Hpc.Stager", wideVectors: false));
        File.Delete(native);
        File.SetLastWriteTimeUtc(hpcdata, DateTime.UtcNow.AddMinutes(-2));
        Assert.Null(ComponentLocator.NativeBuildOf(dll, "Hpc.Stager", wideVectors: false));
    }
}
