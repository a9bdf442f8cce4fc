using System.Collections.Concurrent;
using System.Diagnostics.CodeAnalysis;
using System.Reflection;

namespace Hpc.CommonData.Hosting;

/// <summary>
/// Marks an options property as a command-line switch (and, with <see cref="Environment"/>, an environment variable).
/// Properties whose type has switches of its own (e.g. the cache-tier settings inside the agent's options) are
/// followed, so one options type describes the program's whole command line.
/// </summary>
[AttributeUsage(AttributeTargets.Property)]
public sealed class SwitchAttribute(string name, string help) : Attribute
{
    /// <summary>The switch as typed, e.g. <c>--data-dir</c>; empty for the program's one positional argument.</summary>
    public string Name { get; } = name;
    public string Help { get; } = help;
    /// <summary>An environment variable read for this setting (below the command line, above appsettings.json).</summary>
    public string? Environment { get; init; }
    /// <summary>A secret is never put on a command line a launcher builds (argv is visible in <c>ps</c>): launchers pass it in the environment.</summary>
    public bool Secret { get; init; }
    /// <summary>Shown as the value's placeholder in help, e.g. <c>SIZE</c>; for a positional argument, its name.</summary>
    public string? Meta { get; init; }
    /// <summary>A short spelling, e.g. <c>-d</c> for <c>--dataset</c>.</summary>
    public string? Alias { get; init; }
    /// <summary>The command cannot run without it: missing, it is a usage error naming it.</summary>
    public bool Required { get; init; }
    /// <summary>
    /// A setting of the machine it is given on (an address of that machine's own): handed to the programs a command
    /// starts there, never written into a job's variables for other nodes, where it would name an address they lack.
    /// </summary>
    public bool ThisMachine { get; init; }

    private static readonly ConcurrentDictionary<Type, (SwitchAttribute Switch, PropertyInfo Property)[]> Declared = new();

    /// <summary>
    /// The switches <paramref name="type"/> declares on its own public properties, positional ones included, in
    /// declaration order: the one reading of the declarations that every resolve, help, group and settings file goes by.
    /// </summary>
    [UnconditionalSuppressMessage("Trimming", "IL2070", Justification = "options types are kept whole in native builds")]
    public static IReadOnlyList<(SwitchAttribute Switch, PropertyInfo Property)> DeclaredOn(Type type) =>
        Declared.GetOrAdd(type, t => [.. t.GetProperties(BindingFlags.Public | BindingFlags.Instance)
            .Select(p => (Switch: p.GetCustomAttribute<SwitchAttribute>()!, Property: p)).Where(x => x.Switch is not null)]);
}
