namespace Hpc.CommonData.Local;

/// <summary>Random bytes that do not compress: the worst case for the codec and the size the network really carries.</summary>
public static class SampleData
{
    public static void GenerateRandom(string path, long size)
    {
        var rng = new Random(42);
        var buffer = new byte[1 << 20];
        using var f = File.Create(path);
        for (var left = size; left > 0; left -= buffer.Length)
        {
            rng.NextBytes(buffer);
            f.Write(buffer, 0, (int)Math.Min(buffer.Length, left));
        }
    }
}
