using Hpc.CommonData.Cache;
using Hpc.CommonData.Cli;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Cli;

/// <summary>
/// A verb that talks to the cache tier (list, status, remove, gc, get, nodeprep, prestage). Its cache-tier switches
/// (<c>--cache-hosts</c>, <c>--cache-user</c>, <c>--cache-password-file</c>, <c>--cache-tls</c>, <c>--cache-ca</c>, …)
/// are <see cref="CacheTierOptions"/>' own, the ones the stager and the agent take: the command tree reads them into
/// <see cref="CacheTierSwitches"/> (variables first, then the command line) before the verb's own options are parsed.
/// </summary>
public abstract class CacheClientOptions : ISwitchGroups
{
    protected CacheClientOptions() => Agent = new AgentSwitches(Origins);

    /// <summary>The cache tier as the environment and the command line give it (no default hosts yet).</summary>
    public CacheTierOptions CacheTierSwitches { get; set; } = new();

    private bool _exposureSaid;

    [Switch(VerboseSwitch.Name, VerboseSwitch.Help + ".", Alias = VerboseSwitch.Alias, Environment = VerboseSwitch.Variable)]
    public bool Verbose { get; set; }

    /// <summary>What the cache tier's client says as it goes: everything, on stderr, with --verbose; nothing otherwise (the verb says what failed itself).</summary>
    public Microsoft.Extensions.Logging.ILogger TierLog =>
        Verbose ? new StderrLogger("hpcdata", Microsoft.Extensions.Logging.LogLevel.Debug) : Microsoft.Extensions.Logging.Abstractions.NullLogger.Instance;

    /// <summary>Where each setting came from: the command line, a variable, a client's settings file.</summary>
    public SettingOrigins Origins { get; } = new();

    /// <summary>The node agent, for a verb that also talks to it (<see cref="AgentSwitchNames"/>).</summary>
    public AgentSwitches Agent { get; }

    /// <summary>Which of the agent's switches the verb takes, when it also talks to this node's agent (status, nodeprep, prestage).</summary>
    protected virtual IReadOnlyCollection<string>? AgentSwitchNames => null;

    /// <summary>The title of the agent's section in the verb's help.</summary>
    protected virtual string? AgentTitle => null;

    /// <summary>Further groups the verb nests after the cache tier's and the agent's (node prep's settings).</summary>
    protected virtual IEnumerable<NestedSwitches> MoreGroups => [];

    IEnumerable<NestedSwitches> ISwitchGroups.Groups =>
        (AgentSwitchNames is { } names
            ? [new(CacheTierTitle, CacheTierSwitches), AgentTitle is { } title ? Agent.Nested(names, title) : Agent.Nested(names)]
            : new NestedSwitches[] { new(CacheTierTitle, CacheTierSwitches) }).Concat(MoreGroups);

    private const string CacheTierTitle = "Cache tier (the stager's and the agent's switches; each also from its variable)";

    /// <summary>The cache hosts given, as text (null when neither the command line nor the variable named any).</summary>
    public string? CacheHosts => CacheTierSwitches.Hosts.Count == 0 ? null : string.Join(",", CacheTierSwitches.Hosts);

    /// <summary>
    /// Gives a program this command starts (an agent, a stager) the cache tier as this command was given it: every
    /// switch of the group (<see cref="SwitchGroup.CopyTo"/>), files by their full paths. The launcher puts the password
    /// in the program's environment, never on its command line. Hosts this command only defaulted are not passed: the
    /// program keeps its own default (or its settings file's).
    /// </summary>
    public void PassCacheTierTo(CacheTierOptions target)
    {
        var hosts = target.Hosts;
        Group.CopyTo(CacheTierSwitches, target);
        if (CacheTierSwitches.Hosts.Count == 0) target.Hosts = hosts;
        if (target.PasswordFile is { Length: > 0 } file) target.PasswordFile = Path.GetFullPath(file);
        if (target.TlsCaFile is { Length: > 0 } ca) target.TlsCaFile = Path.GetFullPath(ca);
    }

    /// <summary>The cache tier as this command hands it on (<see cref="PassCacheTierTo"/>), on <paramref name="hosts"/>.</summary>
    public CacheTierOptions CacheTierFor(IReadOnlyList<string> hosts)
    {
        var tier = new CacheTierOptions();
        PassCacheTierTo(tier);
        tier.Hosts = [.. hosts];
        return tier;
    }

    /// <summary>The cache tier's switches, the group every hop hands on whole.</summary>
    public static SwitchGroup Group { get; } = SwitchGroup.Of(typeof(CacheTierOptions));

    /// <summary>
    /// The cache tier to use, resolved from what was given without changing it: 127.0.0.1:6380 when no host was, the
    /// hosts normalised, the password file read. An <see cref="ArgumentException"/> naming the switch, and where its value
    /// came from, when the result cannot be used (a usage error, before the tier is asked anything).
    /// </summary>
    public CacheTierOptions CacheTier()
    {
        var options = CacheTierSwitches.Copy();
        // The default is this command's own: a program it starts keeps its own default (or its appsettings.json).
        if (options.Hosts.Count == 0) options.Hosts = [$"127.0.0.1:{CacheEndpoint.DefaultPort}"];
        options.Hosts = CacheEndpoint.ParseList(string.Join(",", options.Hosts)).Select(h => h.ToString()).ToList();
        if (options.Validate().FirstOrDefault() is { } problem) throw new ArgumentException(Origins.Attribute(problem));
        options.LoadPasswordFile();
        if (!_exposureSaid && Hpc.CommonData.Security.SecretFiles.Exposure((options.PasswordFile, "--cache-password-file")) is { } exposed)
            Console.Error.WriteLine($"hpcdata: warning: {exposed}");
        _exposureSaid = true;
        return options;
    }
}
