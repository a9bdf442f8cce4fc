using CommandLine;
using Hpc.CommonData.Cache;

namespace Hpc.Jobs.Cli;

/// <summary>
/// The account and TLS switches of a verb that talks to the cache tier (list, status, remove, gc, get), declared as the
/// stager and the agent declare them (<see cref="CacheTierOptions"/>'s help texts and variables), so a site's accounts
/// and TLS work the same from every command. Each defaults to its HPCDATA_CACHE_* variable.
/// </summary>
public abstract class CacheClientOptions
{
    [Option("cache-user", HelpText = CacheTierOptions.UserHelp + " (default: $" + CacheTierOptions.UserVariable + ").")]
    public string? CacheUser { get; set; }

    [Option("cache-password-file", HelpText = CacheTierOptions.PasswordFileHelp + " (default: $" + CacheTierOptions.PasswordFileVariable +
        "; $" + CacheTierOptions.PasswordVariable + " gives the password itself).")]
    public string? CachePasswordFile { get; set; }

    [Option("cache-tls", HelpText = CacheTierOptions.TlsHelp + " (default: $" + CacheTierOptions.TlsVariable + ").")]
    public bool CacheTls { get; set; }

    [Option("cache-cluster", HelpText = CacheTierOptions.ClusterHelp + " (default: $" + CacheTierOptions.ClusterVariable + ").")]
    public bool CacheCluster { get; set; }

    [Option("cache-ca", HelpText = CacheTierOptions.TlsCaHelp + " (default: $" + CacheTierOptions.TlsCaVariable + ").")]
    public string? CacheCa { get; set; }

    /// <summary>
    /// The cache tier as the environment gives it, with <paramref name="hosts"/> (a verb's --cache-hosts) and these
    /// switches over it; an <see cref="ArgumentException"/> naming the switch when the result cannot be used (a usage
    /// error, before the tier is asked anything).
    /// </summary>
    public CacheTierOptions CacheTier(string? hosts)
    {
        var options = CacheTierOptions.FromEnvironment();
        if (hosts is { Length: > 0 }) options.Hosts = CacheEndpoint.ParseList(hosts).Select(h => h.ToString()).ToList();
        if (CacheUser is { Length: > 0 }) options.User = CacheUser;
        // A file named on the command line wins over a password the environment gave.
        if (CachePasswordFile is { Length: > 0 }) (options.PasswordFile, options.Password) = (CachePasswordFile, null);
        if (CacheTls) options.Tls = true;
        if (CacheCluster) options.Cluster = true;
        if (CacheCa is { Length: > 0 }) options.TlsCaFile = CacheCa;
        if (options.Validate().FirstOrDefault() is { } problem) throw new ArgumentException(problem);
        options.LoadPasswordFile();
        return options;
    }
}
