using Hpc.CommonData.Format;

namespace Hpc.CommonData.Cli;

/// <summary>
/// The dataset a verb works on, as every verb takes it: <c>NAME[@VERSION]</c>, a positional argument. The node-side
/// verbs (node prep, node release, path, worker) default to the job's variables, so a job script names nothing. The job's
/// version applies to the job's dataset only, as the worker SDK has it (<c>DatasetOptions</c>).
/// </summary>
public readonly record struct DatasetArgument(string Name, string? Version)
{
    public const string Meta = "NAME[@VERSION]";

    /// <summary>What the job's variables give when no dataset is named, said in a verb's help.</summary>
    public const string JobDefault = "default: $HPCDATA_DATASET, at $HPCDATA_VERSION";

    /// <summary><c>owner/name</c> or <c>owner/name@version</c>; a usage error naming what is wrong otherwise.</summary>
    public static DatasetArgument Parse(string given)
    {
        var at = given.IndexOf('@');
        var (name, version) = at < 0 ? (given, null) : (given[..at], given[(at + 1)..]);
        if (!DatasetName.TryValidate(name, out var why)) throw CommandException.Usage(why);
        if (version is { Length: 0 }) throw CommandException.Usage($"'{given}': no version after @");
        return new(name, version);
    }

    /// <summary>
    /// The dataset named, else the job's (<c>HPCDATA_DATASET</c>); null when neither names one. The job's version
    /// (<c>HPCDATA_VERSION</c>) applies to the job's dataset only: another one named without a version is its latest.
    /// </summary>
    public static DatasetArgument? OrJob(string? given) => OrJob(given, Environment.GetEnvironmentVariable);

    /// <summary><see cref="OrJob(string?)"/> with the job's variables read from <paramref name="variables"/>.</summary>
    public static DatasetArgument? OrJob(string? given, Func<string, string?> variables)
    {
        var job = JobVariables.First(variables(JobVariables.Dataset));
        if (JobVariables.First(given, job) is not { } text) return null;
        var selected = Parse(text);
        return selected.Version is null && selected.Name == job ? selected with { Version = JobVariables.First(variables(JobVariables.Version)) } : selected;
    }

    public override string ToString() => Version is null ? Name : $"{Name}@{Version}";
}
