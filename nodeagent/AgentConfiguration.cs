using Hpc.CommonData.Hosting;
using Microsoft.Extensions.Configuration;

namespace Hpc.NodeAgent;

/// <summary>The agent's settings from its configuration (appsettings.json under the command line and variables), checked.</summary>
public static class AgentConfiguration
{
    /// <summary>
    /// Binds and validates section "Agent" (<see cref="ProgramContract{T}.Bind"/>), then what only the agent needs: its
    /// password file read and its data directory usable. Returns null, or the exit code after one line on stderr.
    /// </summary>
    public static int? Bind(IConfiguration configuration, IReadOnlyDictionary<string, string?> settings, out NodeAgentOptions options)
    {
        if (ProgramContract<NodeAgentOptions>.Bind(configuration, settings, out options) is { } refused) return refused;
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
