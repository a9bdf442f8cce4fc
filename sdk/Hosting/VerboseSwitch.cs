namespace Hpc.CommonData.Hosting;

/// <summary>
/// The <c>--verbose</c> of the verbs that talk to the cache tier: declared with these words wherever it is taken, so it
/// means the same on every verb. Verbose is for finding out why a command is slow or refused, on stderr; what the
/// command prints on stdout and its exit code stay the same.
/// </summary>
public static class VerboseSwitch
{
    public const string Name = "--verbose";

    /// <summary>The short form, as curl, ssh and rsync spell it.</summary>
    public const string Alias = "-v";

    /// <summary>
    /// The switch's variable: set by the jobs prestage writes when it was given (node prep on every node is verbose
    /// too), and by a user who wants every command verbose.
    /// </summary>
    public const string Variable = "HPCDATA_VERBOSE";

    public const string Help = "Say on stderr what happens on the way: each cache host connected (how long, over TLS or not, as which account), " +
                               "each retry and its reason; stdout and the exit code stay the same";
}
