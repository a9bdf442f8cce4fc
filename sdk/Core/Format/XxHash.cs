using System.Runtime.InteropServices;
using Hpc.CommonData.Native;

namespace Hpc.CommonData.Format;

/// <summary>xxHash3 (64- and 128-bit) over the reference C implementation.</summary>
public static unsafe partial class XxHash
{
    static XxHash() => NativeLibraries.EnsureRegistered();

    [StructLayout(LayoutKind.Sequential)]
    private struct Hash128 { public ulong Low; public ulong High; }

    [LibraryImport(NativeLibraries.XxHash, EntryPoint = "XXH3_128bits")]
    private static partial Hash128 Xxh3_128(byte* data, nuint length);

    [LibraryImport(NativeLibraries.XxHash, EntryPoint = "XXH3_64bits_withSeed")]
    private static partial ulong Xxh3_64(byte* data, nuint length, ulong seed);

    [LibraryImport(NativeLibraries.XxHash, EntryPoint = "XXH3_createState")]
    private static partial IntPtr CreateState();

    [LibraryImport(NativeLibraries.XxHash, EntryPoint = "XXH3_freeState")]
    private static partial int FreeState(IntPtr state);

    [LibraryImport(NativeLibraries.XxHash, EntryPoint = "XXH3_128bits_reset")]
    private static partial int Reset128(IntPtr state);

    [LibraryImport(NativeLibraries.XxHash, EntryPoint = "XXH3_128bits_update")]
    private static partial int Update128(IntPtr state, byte* data, nuint length);

    [LibraryImport(NativeLibraries.XxHash, EntryPoint = "XXH3_128bits_digest")]
    private static partial Hash128 Digest128(IntPtr state);

    public static UInt128 Hash128Of(ReadOnlySpan<byte> data)
    {
        fixed (byte* p = data)
        {
            var h = Xxh3_128(p, (nuint)data.Length);
            return new UInt128(h.High, h.Low);
        }
    }

    public static ulong Hash64Of(ReadOnlySpan<byte> data, ulong seed = 0)
    {
        fixed (byte* p = data) return Xxh3_64(p, (nuint)data.Length, seed);
    }

    /// <summary>Hashes memory that may be longer than a span can describe (a mapped multi-GB file).</summary>
    public static UInt128 Hash128Of(byte* data, long length)
    {
        using var h = new Streaming128();
        const long step = 1L << 30;
        for (long o = 0; o < length; o += step) h.Append(data + o, Math.Min(step, length - o));
        return h.Digest();
    }

    /// <summary>Incremental XXH3-128 for whole-dataset hashes.</summary>
    public sealed class Streaming128 : IDisposable
    {
        private IntPtr _state;

        public Streaming128()
        {
            _state = CreateState();
            if (_state == IntPtr.Zero) throw new OutOfMemoryException("XXH3_createState failed");
            Reset128(_state);
        }

        public void Append(ReadOnlySpan<byte> data)
        {
            fixed (byte* p = data) Append(p, data.Length);
        }

        public void Append(byte* data, long length)
        {
            ObjectDisposedException.ThrowIf(_state == IntPtr.Zero, this);
            Update128(_state, data, (nuint)length);
        }

        public UInt128 Digest()
        {
            ObjectDisposedException.ThrowIf(_state == IntPtr.Zero, this);
            var h = Digest128(_state);
            return new UInt128(h.High, h.Low);
        }

        public void Dispose()
        {
            var s = Interlocked.Exchange(ref _state, IntPtr.Zero);
            if (s != IntPtr.Zero) FreeState(s);
        }
    }
}
