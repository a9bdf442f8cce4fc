using System.Diagnostics.CodeAnalysis;
using System.Reflection;
using Hpc.CommonData.Cache;

namespace Hpc.CommonData.Hosting;

/// <summary>
/// The client's settings files: how this machine's users reach the cache tier (hosts, account, password file, CA, TLS,
/// replicas, rate), so nobody exports four variables in every shell and job script. <see cref="SiteFile"/> first, then
/// the user's own (<c>$XDG_CONFIG_HOME/hpcdata/client.conf</c>, else <c>~/.config/hpcdata/client.conf</c>), each
/// line <c>key = value</c> with the switch's name (<c>cache-hosts = cache1:6380,cache2:6380</c>) or its variable's
/// (<c>HPCDATA_CACHE_HOSTS=…</c>, so the same file can be a systemd <c>EnvironmentFile=</c>); <c>#</c> starts a comment.
/// A switch wins over the environment, the environment over the user's file, that over the site's, that over the
/// default. <see cref="FileVariable"/> names one file instead of both (a second site, a test).
/// </summary>
public sealed class ClientConfig
{
    public const string FileVariable = "HPCDATA_CLIENT_CONFIG";
    public const string SiteFile = "/etc/hpcdata/client.conf";

    private readonly Dictionary<string, string> _byVariable;
    private readonly Dictionary<string, string> _lineOf;

    private ClientConfig(Dictionary<string, string> byVariable, Dictionary<string, string> lineOf, IReadOnlyList<string> files) =>
        (_byVariable, _lineOf, Files) = (byVariable, lineOf, files);

    /// <summary>No files: what a program that reads none resolves beneath its variables.</summary>
    public static ClientConfig None { get; } = new([], [], []);

    /// <summary>The files that were read, in the order read (the later wins).</summary>
    public IReadOnlyList<string> Files { get; }

    /// <summary>Every setting the files give, by its variable: what a program this one starts must see beneath its own environment.</summary>
    public IReadOnlyDictionary<string, string> Values => _byVariable;

    /// <summary>The value a file gives the setting whose variable is <paramref name="variable"/>, or null.</summary>
    public string? this[string variable] => _byVariable.GetValueOrDefault(variable);

    /// <summary>The file and line that gave the setting whose variable is <paramref name="variable"/> (<c>/etc/hpcdata/client.conf:3</c>), or null.</summary>
    public string? LineOf(string variable) => _lineOf.GetValueOrDefault(variable);

    /// <summary>The user's file: <c>$XDG_CONFIG_HOME/hpcdata/client.conf</c>, else <c>~/.config/hpcdata/client.conf</c>.</summary>
    public static string? UserFile(Func<string, string?> environment) =>
        environment("XDG_CONFIG_HOME") is { Length: > 0 } xdg ? Path.Combine(xdg, "hpcdata", "client.conf")
        : environment("HOME") is { Length: > 0 } home ? Path.Combine(home, ".config", "hpcdata", "client.conf")
        : null;

    /// <summary>The files that apply, whether or not they exist: <see cref="FileVariable"/>'s, else the site's and the user's.</summary>
    public static IReadOnlyList<string> Candidates(Func<string, string?> environment) =>
        environment(FileVariable) is { Length: > 0 } only ? [only]
        : OperatingSystem.IsWindows() ? [.. new[] { UserFile(environment) }.OfType<string>()]
        : [SiteFile, .. new[] { UserFile(environment) }.OfType<string>()];

    /// <summary>
    /// Reads the files that exist (a file <see cref="FileVariable"/> names must exist). A line that does not read, or a
    /// key that is not one of <see cref="Keys"/>, is a <see cref="FormatException"/> naming the file and the line.
    /// </summary>
    public static ClientConfig Load(Func<string, string?>? environment = null)
    {
        environment ??= Environment.GetEnvironmentVariable;
        var named = environment(FileVariable) is { Length: > 0 };
        var values = new Dictionary<string, string>(StringComparer.Ordinal);
        var lineOf = new Dictionary<string, string>(StringComparer.Ordinal);
        var read = new List<string>();
        foreach (var file in Candidates(environment))
        {
            if (!File.Exists(file))
            {
                if (named) throw new FormatException($"{FileVariable}: '{file}' does not exist");
                continue;
            }
            string[] lines;
            try { lines = File.ReadAllLines(file); }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException) { throw new FormatException($"{file}: cannot be read: {e.Message}", e); }
            for (var i = 0; i < lines.Length; i++)
            {
                var line = lines[i].Trim();
                if (line.Length == 0 || line[0] == '#') continue;
                var equals = line.IndexOf('=');
                if (equals <= 0) throw new FormatException($"{file}:{i + 1}: '{line}' is not 'key = value'");
                var key = line[..equals].Trim();
                if (!Known.TryGetValue(key.TrimStart('-'), out var variable) && !KnownVariables.Contains(key))
                    throw new FormatException($"{file}:{i + 1}: unknown setting '{key}' (a client's file takes {string.Join(", ", Keys)})");
                variable ??= key;
                var value = Unquote(line[(equals + 1)..].Trim());
                if (value.StartsWith("~/", StringComparison.Ordinal) && environment("HOME") is { Length: > 0 } home) value = Path.Combine(home, value[2..]);
                if (SettingValues.Check(TypeOf[variable], value) is { } problem) throw new FormatException($"{file}:{i + 1}: {key}: {problem}");
                if (OutOfRange(variable, value) is { } range) throw new FormatException($"{file}:{i + 1}: {range.Replace("--" + key.TrimStart('-'), key, StringComparison.OrdinalIgnoreCase)}");
                values[variable] = value;
                lineOf[variable] = $"{file}:{i + 1}";
            }
            read.Add(file);
        }
        return new ClientConfig(values, lineOf, read);
    }

    /// <summary>
    /// What the cache tier's own check says of this one value and of nothing else: a value that reads but cannot be
    /// used (<c>replicas = -1</c>) is reported at the line that gave it, not later as if a switch had.
    /// </summary>
    [UnconditionalSuppressMessage("Trimming", "IL2026", Justification = "CacheTierOptions is kept whole (DynamicDependency)")]
    private static string? OutOfRange(string variable, string value)
    {
        // A file the settings name may exist only where it is used (a node's password file): that stays the verb's check.
        if (variable is SlurmStagingVariable or CacheTierOptions.PasswordFileVariable or CacheTierOptions.TlsCaVariable) return null;
        // No hosts and a password: the checks that tie one setting to another (an account needs a password, replicas
        // no more than hosts) then stay silent, so what is left is this value's own.
        static CacheTierOptions Trial() => new() { Hosts = [], Password = "set" };
        var before = Trial().Validate().ToHashSet(StringComparer.Ordinal);
        var trial = Trial();
        if (SettingLayers.ApplyBeneathCommandLine([.. SettingSlot.Of(trial)], name => name == variable ? value : null, None, new SettingOrigins()) is { } problem) return problem;
        return trial.Validate().FirstOrDefault(p => !before.Contains(p));
    }

    /// <summary>The keys a client's file takes: the cache tier's settings that have a variable, the password itself excepted (name a password file).</summary>
    public static IEnumerable<string> Keys => Known.Keys;

    private static string Unquote(string value) =>
        value.Length >= 2 && (value[0] == '"' && value[^1] == '"' || value[0] == '\'' && value[^1] == '\'') ? value[1..^1] : value;

    private static readonly Dictionary<string, string> Known = new(StringComparer.OrdinalIgnoreCase);
    private static readonly HashSet<string> KnownVariables = new(StringComparer.Ordinal);
    private static readonly Dictionary<string, Type> TypeOf = new(StringComparer.Ordinal);

    [UnconditionalSuppressMessage("Trimming", "IL2026", Justification = "CacheTierOptions is kept whole (DynamicDependency)")]
    [DynamicDependency(DynamicallyAccessedMemberTypes.PublicProperties, typeof(CacheTierOptions))]
    static ClientConfig()
    {
        foreach (var (s, p) in SwitchAttribute.DeclaredOn(typeof(CacheTierOptions)))
        {
            if (s is not { Environment: { } variable } || s.Secret) continue;
            Known[s.Name.TrimStart('-')] = variable;
            KnownVariables.Add(variable);
            TypeOf[variable] = p.PropertyType;
        }
        // How the site stages a Slurm job's data (prestage reads it): not a cache-tier setting, but one every user's
        // prestage must agree on, so it lives in the site's file beside the tier.
        Known[SlurmStagingKey] = SlurmStagingVariable;
        KnownVariables.Add(SlurmStagingVariable);
        TypeOf[SlurmStagingVariable] = typeof(string);
    }

    /// <summary><c>slurm-staging = step|burst-buffer</c>: whether the site's Slurm stages data itself (its controller
    /// runs deploy/slurm/burst_buffer.lua), so a job names its data with a directive instead of running a node-prep step.</summary>
    public const string SlurmStagingKey = "slurm-staging";
    public const string SlurmStagingVariable = "HPCDATA_SLURM_STAGING";
}
