using Hpc.CommonData.Hosting;
using Hpc.CommonData;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;
using Hpc.CommonData.Cli;
using Hpc.Jobs.Cli;
using Microsoft.Extensions.Logging;

namespace Hpc.Jobs.Commands;

public sealed class GetOptions : CacheClientOptions, IVerbOptions
{
    public static string Verb => "get";

    public static string Summary => "Copy a dataset to a path, verified: a file for a file dataset, the tree (directories, links, modes, times) for a directory dataset. " +
                        "From this node's agent when one runs, else from the cache tier.";

    public static IReadOnlyList<(string Command, string What)> Examples =>
    [
        ("hpcdata get risk/prices ./prices.csv --cache-hosts cache1:6380,cache2:6380",
         "the latest version of risk/prices into a file"),
        ("hpcdata get risk/history ./history --json",
         "a directory dataset into a new directory, the result as one JSON object"),
    ];

    [Switch("", "Dataset (owner/name), optionally @ a version id; the latest version by default.", Meta = DatasetArgument.Meta, Required = true)]
    public string Dataset { get; set; } = "";

    [Switch("", "Where to write it: a file path, or a directory to create for a directory dataset.", Meta = "DEST", Required = true)]
    public string Destination { get; set; } = "";

    [Switch("--force", "Replace DEST if it exists.")]
    public bool Force { get; set; }

    [Switch("--json", "Print the result as one JSON object (dataset, version, bytes, files, path, mode) instead of the line.")]
    public bool Json { get; set; }

    [Switch(QuietSwitch.Name, QuietSwitch.Help + ".", Alias = QuietSwitch.Alias)]
    public bool Quiet { get; set; }

}

/// <summary>Exit codes: 0 written; 1 the data could not be had or written (it says why); 2 bad usage or DEST exists.</summary>
public static class GetCommand
{
    public static async Task<int> RunAsync(GetOptions o, CancellationToken ct)
    {
        var (name, version) = DatasetArgument.Parse(o.Dataset);
        var destination = Path.GetFullPath(o.Destination);
        if ((File.Exists(destination) || Directory.Exists(destination) || new FileInfo(destination).LinkTarget is not null) && !o.Force)
            throw CommandException.Usage($"{destination} exists; give --force to replace it");
        var tier = o.CacheTier();
        var progress = ProgressLine.ForTerminal(o.Quiet);
        try
        {
            // Without an agent the fetch is this process's own, and reports to the line itself.
            var options = new DatasetOptions { Version = version, Logger = new StderrLogger("hpcdata get", o.Verbose ? Microsoft.Extensions.Logging.LogLevel.Debug : Microsoft.Extensions.Logging.LogLevel.Warning), CacheTier = tier, Progress = progress?.Fetching($"fetching {name}") };
            await using var data = await OpenAsync(name, options, progress, ct);
            // A mapped copy was verified by the agent when it was published; the bytes this process sees are checked again,
            // so what lands at DEST is exactly the staged content whatever happened to the node's copy since.
            if (data.Mode == DataAccessMode.Map && !data.VerifyHash())
                throw CommandException.Failed($"{name} version {data.Version}: the node's copy does not match its hash; nothing was written", ErrorCode.Integrity);

            // Written beside DEST and renamed into place, so DEST is never half-written and an old one survives a failure.
            var staging = Path.Combine(Path.GetDirectoryName(destination)!, $".{Path.GetFileName(destination)}.hpcdata-get-{Environment.ProcessId}");
            progress?.Restart();
            long written = 0;
            void Written(long n)
            {
                written += n;
                progress?.Show($"writing {Path.GetFileName(destination)}", written, data.Length);
            }
            try
            {
                if (data.Files.Count > 0)
                    TreeWriter.Write(staging, data.Files, (file, stream) => Copy(data, file.Offset, file.Length, stream, Written));
                else
                    await using (var file = new FileStream(staging, FileMode.CreateNew, FileAccess.Write, FileShare.None, 1 << 20))
                        Copy(data, 0, data.Length, file, Written);
                Replace(staging, destination);
            }
            catch
            {
                Remove(staging);
                throw;
            }
            progress?.Clear();
            var what = data.Files.Count > 0 ? $"a tree of {data.Files.Count(f => f.IsFile)} files" : "a file";
            if (o.Quiet) return 0;
            Console.WriteLine(o.Json
                ? JsonFields.Object([("dataset", name), ("version", data.Version), ("bytes", data.Length), ("files", data.Files.Count(f => f.IsFile)), ("path", destination),
                    ("mode", data.Mode.ToString().ToLowerInvariant())])
                : $"{name} version {data.Version}: {ByteSize.Format(data.Length)} as {what} at {destination} (verified, via {data.Mode.ToString().ToLowerInvariant()})");
            return 0;
        }
        catch (Exception e) when (e is CommonDataException or IOException or UnauthorizedAccessException or ArgumentException)
        {
            throw CommandException.From(e);
        }
        finally
        {
            // Whatever ends the command, its last words start at the margin.
            progress?.Clear();
        }
    }

    private static async Task<Dataset> OpenAsync(string name, DatasetOptions options, ProgressLine? progress, CancellationToken ct)
    {
        // The agent fetches before it answers the open; its status says how far it is.
        await using var watch = progress is null ? null : new AgentFetchProgress(progress, options.AgentPipe, name);
        return await Dataset.OpenAsync(name, options, ct);
    }

    private static void Copy(Dataset data, long offset, long length, Stream to, Action<long> written)
    {
        for (long done = 0; done < length;)
        {
            var n = (int)Math.Min(1 << 24, length - done);
            to.Write(data.GetSpan(offset + done, n));
            done += n;
            written(n);
        }
    }

    private static void Replace(string staging, string destination)
    {
        Remove(destination);
        if (Directory.Exists(staging)) Directory.Move(staging, destination);
        else File.Move(staging, destination);
    }

    private static void Remove(string path) => TreeWriter.Delete(path);

}
