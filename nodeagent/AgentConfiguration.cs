using Hpc.CommonData.Hosting;

namespace Hpc.NodeAgent;

/// <summary>What only the agent checks of its resolved settings before it starts.</summary>
public static class AgentConfiguration
{
    /// <summary>
    /// Its password file read and its data directory usable. Returns null, or the exit code after one line on stderr.
    /// </summary>
    public static int? Check(NodeAgentOptions options)
    {
        try { options.CacheTier.LoadPasswordFile(); }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            return ProgramContract<NodeAgentOptions>.Refuse($"--cache-password-file: {e.Message}");
        }
        try { Directory.CreateDirectory(options.DataDirectory); }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            // Not a usage error: the command line was right, the node's file system is not (EX_CANTCREAT, or EX_NOPERM).
            ProgramContract<NodeAgentOptions>.Refuse($"--data-dir '{options.DataDirectory}' cannot be used: {e.Message}");
            return e is UnauthorizedAccessException ? ExitCodes.Denied : ExitCodes.NoSpace;
        }
        return null;
    }
}
