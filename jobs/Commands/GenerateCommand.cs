using Hpc.CommonData.Hosting;
using Hpc.CommonData;
using Hpc.CommonData.Cli;
using Hpc.Jobs.Cli;
using Hpc.CommonData.Local;

namespace Hpc.Jobs.Commands;

public sealed class GenerateOptions : IVerbOptions
{
    public static string Verb => "generate";

    public static string Summary => "Write test data to stage: market history CSV (compressible), random bytes, or a version of a market history that changes the way such data does.";

    [Switch("", "Output file.", Meta = "PATH", Required = true)]
    public string Path { get; set; } = "";

    [Switch("--size", "Bytes to write: " + SizeOption.Rule + ".", Meta = "SIZE")]
    public string Size { get; set; } = "256MB";

    [Switch("--data", "csv (ordered by date), random, history (one CSV ordered by instrument then date; each --version adds a day to every " +
        "instrument and revises ten past closes) or history-files (a directory of per-instrument CSVs; each --version adds a day to every file and replaces 1% of them).", Meta = "KIND")]
    public string Data { get; set; } = "csv";

    [Switch("--version", "For history and history-files: which version (0 is the first; --size sets its size).")]
    public int Version { get; set; }

    [Switch("--seed", "For history and history-files: the seed; the same seed, size and version give the same bytes.")]
    public int Seed { get; set; } = 42;

    [Switch("--instruments", "For history and history-files: instruments.")]
    public int Instruments { get; set; } = MarketHistory.DefaultInstruments;

}

public static class GenerateCommand
{
    public static Task<int> RunAsync(GenerateOptions o, CancellationToken ct)
    {
        var (Path, Size, Data) = (o.Path, o.Size, o.Data);
        if (Data is not ("csv" or "random" or "history" or "history-files")) throw new ArgumentException($"--data '{Data}' is not one of csv, random, history, history-files");
        if (o.Version < 0 || o.Instruments is < 1 or > 99_999) throw new ArgumentException("--version must be 0 or more and --instruments 1..99999");
        var size = SizeOption.Parse("--size", Size);
        switch (Data)
        {
            case "random": SampleData.GenerateRandom(Path, size); break;
            case "history": MarketHistory.GenerateByInstrument(Path, size, o.Version, o.Instruments, o.Seed); break;
            case "history-files":
                MarketHistory.GenerateInstrumentFiles(Path, size, o.Version, o.Instruments, o.Seed);
                var files = new DirectoryInfo(Path).GetFiles();
                Console.WriteLine($"{Path}: {files.Length} files, {ByteSize.Format(files.Sum(f => f.Length))}");
                return Task.FromResult(0);
            default: MarketHistory.Generate(Path, size); break;
        }
        Console.WriteLine($"{Path}: {ByteSize.Format(new FileInfo(Path).Length)}");
        return Task.FromResult(0);
    }
}
