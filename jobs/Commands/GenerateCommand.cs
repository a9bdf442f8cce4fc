using CommandLine;
using Hpc.CommonData;
using Hpc.Jobs.Data;

namespace Hpc.Jobs.Commands;

[Verb("generate", HelpText = "Write test data to stage: market history CSV (compressible) or random bytes.")]
public sealed class GenerateOptions
{
    [Value(0, MetaName = "path", Required = true, HelpText = "Output file.")]
    public string Path { get; set; } = "";

    [Option("size", Default = "256MB", HelpText = "Bytes to write (e.g. 64MB, 1GB).")]
    public string Size { get; set; } = "256MB";

    [Option("data", Default = "csv", HelpText = "csv or random.")]
    public string Data { get; set; } = "csv";

}

public static class GenerateCommand
{
    public static Task<int> RunAsync(GenerateOptions o, CancellationToken ct)
    {
        var (Path, Size, Data) = (o.Path, o.Size, o.Data);
        if (Data is not ("csv" or "random")) throw new ArgumentException($"--data '{Data}' is not one of csv, random");
        var size = ByteSize.Parse(Size).Bytes;
        if (Data == "random") SampleData.GenerateRandom(Path, size);
        else MarketHistory.Generate(Path, size);
        Console.WriteLine($"{Path}: {ByteSize.Format(new FileInfo(Path).Length)}");
        return Task.FromResult(0);
    }
}

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
