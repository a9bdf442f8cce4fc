using CommandLine;
using Hpc.CommonData;
using Hpc.CommonData.Cli;
using Hpc.Jobs.Cli;
using Hpc.CommonData.Local;

namespace Hpc.Jobs.Commands;

[Verb("generate", HelpText = "Write test data to stage: market history CSV (compressible), random bytes, or a version of a market history that changes the way such data does.")]
public sealed class GenerateOptions
{
    [Value(0, MetaName = "path", Required = true, HelpText = "Output file.")]
    public string Path { get; set; } = "";

    [Option("size", Default = "256MB", HelpText = "Bytes to write: " + SizeOption.Rule + ".")]
    public string Size { get; set; } = "256MB";

    [Option("data", Default = "csv", HelpText = "csv (ordered by date), random, history (one CSV ordered by instrument then date; each --version adds a day to every " +
        "instrument and revises ten past closes) or history-files (a directory of per-instrument CSVs; each --version adds a day to every file and replaces 1% of them).")]
    public string Data { get; set; } = "csv";

    [Option("version", Default = 0, HelpText = "For history and history-files: which version (0 is the first; --size sets its size).")]
    public int Version { get; set; }

    [Option("seed", Default = 42, HelpText = "For history and history-files: the seed; the same seed, size and version give the same bytes.")]
    public int Seed { get; set; } = 42;

    [Option("instruments", Default = MarketHistory.DefaultInstruments, HelpText = "For history and history-files: instruments.")]
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
