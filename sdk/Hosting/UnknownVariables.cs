using System.Diagnostics.CodeAnalysis;
using System.Reflection;

namespace Hpc.CommonData.Hosting;

/// <summary>
/// A variable named <c>HPCDATA_…</c> that nothing reads: a misspelt setting (CACHE_HOST for CACHE_HOSTS) would otherwise
/// leave the default in force without a word, and the run would fail far from the typo, or not at all on the wrong tier.
/// </summary>
public static class UnknownVariables
{
    public const string Prefix = "HPCDATA_";

    /// <summary>
    /// The variables the project reads or sets that no switch declares: what one of its processes hands the next (a job
    /// step's dataset, an agent's log and exit file), the site's and the build's knobs, and the ones the documentation
    /// names for the tests and the lab. A switch's variable is not listed here: its declaration is the list.
    /// </summary>
    public static readonly IReadOnlyList<string> Undeclared =
    [
        ClientConfig.FileVariable, "HPCDATA_SETTINGS", "HPCDATA_STATE_DIR", "HPCDATA_BIN", "HPCDATA_NATIVE", "HPCDATA_LAUNCHER", "HPCDATA_MODE",
        "HPCDATA_AGENT_LOG", "HPCDATA_AGENT_EXIT_FILE", "HPCDATA_AGENT_MANAGED",
        "HPCDATA_DATASET", "HPCDATA_DATASETS", "HPCDATA_DATASET_PATH", "HPCDATA_VERSION", "HPCDATA_JOB_ID", "HPCDATA_ENDPOINTS_DIR",
        "HPCDATA_SERVICE_ENDPOINTS", "HPCDATA_MPI_LIBRARY", "HPCDATA_GARNET", "HPCDATA_WIDE_VECTORS",
        "HPCDATA_FUZZ_ITERATIONS", "HPCDATA_STAGER_MAP", "HPCDATA_UPDATE_GOLDEN", "HPCDATA_KEEP_CHART",
    ];

    /// <summary>Every <c>HPCDATA_</c> variable the project knows: the switches' of the hosting library and of <paramref name="more"/>, and <see cref="Undeclared"/>.</summary>
    [UnconditionalSuppressMessage("Trimming", "IL2026", Justification = "the options types are kept whole in native builds (TrimmerRootAssembly, DynamicDependency)")]
    [UnconditionalSuppressMessage("Trimming", "IL2070", Justification = "the options types are kept whole in native builds (TrimmerRootAssembly, DynamicDependency)")]
    [UnconditionalSuppressMessage("Trimming", "IL2075", Justification = "the options types are kept whole in native builds (TrimmerRootAssembly, DynamicDependency)")]
    [DynamicDependency(DynamicallyAccessedMemberTypes.PublicProperties, typeof(Cache.CacheTierOptions))]
    public static IReadOnlySet<string> Known(params Assembly[] more)
    {
        var known = new HashSet<string>(Undeclared, StringComparer.Ordinal);
        foreach (var assembly in new[] { typeof(SwitchAttribute).Assembly, typeof(UnknownVariables).Assembly }.Concat(more).Distinct())
        {
            Type[] types;
            try { types = assembly.GetTypes(); }
            catch (ReflectionTypeLoadException e) { types = [.. e.Types.OfType<Type>()]; }
            foreach (var type in types.Where(t => t.IsClass && !t.IsGenericTypeDefinition))
                foreach (var (s, _) in SwitchAttribute.DeclaredOn(type))
                    if (s.Environment is { Length: > 0 } variable) known.Add(variable);
        }
        return known;
    }

    /// <summary>One warning per <c>HPCDATA_</c> variable of <paramref name="environment"/> that is not <paramref name="known"/>, with the nearest known name when one is close.</summary>
    public static IEnumerable<string> Warnings(string program, IEnumerable<string> environment, IReadOnlySet<string> known) =>
        Problems(program, environment, known, Prefix).Select(problem => $"{program}: warning: {problem}");

    /// <summary>A sentence per variable of <paramref name="environment"/> under <paramref name="prefix"/> that is not
    /// <paramref name="known"/>, with the nearest known name when one is close.</summary>
    public static IEnumerable<string> Problems(string program, IEnumerable<string> environment, IReadOnlySet<string> known, string prefix) =>
        environment.Where(v => v.StartsWith(prefix, StringComparison.Ordinal) && !known.Contains(v)).Order(StringComparer.Ordinal)
            .Select(v => $"{v} is not a setting of {program}" + (Closest(v, known) is { } near ? $"; did you mean {near}?" : ""));

    // The prefix is shared by every name, so it says nothing of which one was meant: suggest on what follows it, or a
    // long prefix would make any short name look close to any other.
    private static string? Closest(string typed, IEnumerable<string> known) =>
        Suggestions.Closest(typed[Prefix.Length..], known.Select(k => k[Prefix.Length..])) is { } tail ? Prefix + tail : null;

    /// <summary>Writes <see cref="Warnings"/> for this process's environment on stderr. Never throws: a warning must not fail a run.</summary>
    /// <param name="leftTo">A prefix whose variables the program started next warns of itself (<see cref="IProgramOptions.OwnVariables"/>).</param>
    public static void Warn(string program, string? leftTo, params Assembly[] more)
    {
        try
        {
            var names = Environment.GetEnvironmentVariables().Keys.OfType<string>().Where(v => leftTo is null || !v.StartsWith(leftTo, StringComparison.Ordinal));
            foreach (var line in Warnings(program, names, Known(more))) Console.Error.WriteLine(line);
        }
        catch (Exception e) when (e is not OutOfMemoryException) { }
    }
}
