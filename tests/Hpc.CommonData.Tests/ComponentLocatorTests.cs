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
}
