using System.Reflection;
using System.Runtime.InteropServices;

namespace Hpc.CommonData.Native;

/// <summary>
/// Maps the logical library names used by our P/Invoke declarations to the files each platform ships:
/// Debian's liblz4-1 / libxxhash0 on Linux, lz4.dll / xxhash.dll beside the application on Windows.
/// </summary>
internal static class NativeLibraries
{
    internal const string Lz4 = "lz4";
    internal const string XxHash = "xxhash";

    private static readonly Dictionary<string, string[]> Candidates = new()
    {
        [Lz4] = OperatingSystem.IsWindows() ? ["lz4.dll", "liblz4.dll"] :
                OperatingSystem.IsMacOS() ? ["liblz4.1.dylib", "liblz4.dylib"] : ["liblz4.so.1", "liblz4.so"],
        [XxHash] = OperatingSystem.IsWindows() ? ["xxhash.dll", "libxxhash.dll"] :
                OperatingSystem.IsMacOS() ? ["libxxhash.0.dylib", "libxxhash.dylib"] : ["libxxhash.so.0", "libxxhash.so"],
    };

    private static int _registered;

    internal static void EnsureRegistered()
    {
        if (Interlocked.Exchange(ref _registered, 1) == 0)
            NativeLibrary.SetDllImportResolver(typeof(NativeLibraries).Assembly, Resolve);
    }

    private static IntPtr Resolve(string name, Assembly assembly, DllImportSearchPath? path)
    {
        if (!Candidates.TryGetValue(name, out var files)) return IntPtr.Zero;
        foreach (var file in files)
            if (NativeLibrary.TryLoad(file, assembly, path, out var handle)) return handle;
        var package = name == Lz4 ? "liblz4-1" : "libxxhash0";
        throw new DllNotFoundException(
            $"Native library '{name}' not found (tried {string.Join(", ", files)}). " +
            (OperatingSystem.IsLinux() ? $"Install it with: apt-get install {package}" : $"Place {files[0]} beside the application."));
    }
}
