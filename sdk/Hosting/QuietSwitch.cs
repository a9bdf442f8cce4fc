namespace Hpc.CommonData.Hosting;

/// <summary>
/// The <c>--quiet</c> of the verbs that show progress on a terminal or print a summary (stage, get, nodeprep,
/// prestage): declared with these words wherever it is taken, so it means the same on every verb. Quiet is for scripts
/// and job steps that only look at the exit code: what goes wrong still reaches stderr.
/// </summary>
public static class QuietSwitch
{
    public const string Name = "--quiet";

    /// <summary>The short form every verb with <see cref="Name"/> takes, as cp, curl and srun spell it.</summary>
    public const string Alias = "-q";

    public const string Help = "Print no progress line and no summary; errors and warnings still go to stderr and the exit code is the same";
}
