using System.Diagnostics.CodeAnalysis;
using System.Text;
using Hpc.CommonData.Hosting;

namespace Hpc.CommonData.Cli;

/// <summary>
/// A verb's options type: its name and summary beside the <see cref="SwitchAttribute"/> properties that are its
/// command line — the grammar the programs' own options (<see cref="IProgramOptions"/>) use, so a verb can nest a
/// program's switch groups (<see cref="ISwitchGroups"/>) and each switch is declared once.
/// </summary>
public interface IVerbOptions
{
    static abstract string Verb { get; }
    static abstract string Summary { get; }
    /// <summary>What the usage line shows after the options, e.g. the command a verb runs (<c>-- COMMAND [ARGS…]</c>).</summary>
    static virtual string Trailing => "";
    /// <summary>Left out of the program's verb list (verbs other programs run, not people).</summary>
    static virtual bool Hidden => false;
    /// <summary>Command lines the help shows last, each under what it does.</summary>
    static virtual IReadOnlyList<(string Command, string What)> Examples => [];
    /// <summary>
    /// The verb needs nothing from the client's settings files and must not fail on a mistake in them (noderelease, run
    /// in Slurm's Epilog, where a failure drains the node): it warns and goes on without them.
    /// </summary>
    static virtual bool WithoutSettingsFile => false;
}

/// <summary>
/// The command line of one verb, read from its options type <typeparamref name="T"/>: the variables of its switches and
/// of the groups it nests, then the groups' switches, then its own switches and positional arguments. <c>--help</c>
/// (or <c>-h</c>) prints every switch with its default and variable; anything wrong is one line naming it, exit 2.
/// </summary>
public static class VerbContract<[DynamicallyAccessedMembers(OptionsType.Members)] T> where T : class, IVerbOptions, new()
{
    public static Task<int> RunAsync(string usage, string[] args, Func<T, CancellationToken, Task<int>> run)
    {
        var end = Array.IndexOf(args, "--") is var e and >= 0 ? e : args.Length;
        if (args[..end].Any(a => a is "--help" or "-h"))
        {
            Console.Out.Write(Help(usage));
            return Task.FromResult(ExitCodes.Ok);
        }
        var (options, problem) = Parse(args);
        if (problem is not null)
        {
            Console.Error.WriteLine($"{usage}: {problem} (see {usage} --help)");
            return Task.FromResult(ExitCodes.Usage);
        }
        return CommandTree.RunCancellableAsync(usage, ct => run(options, ct));
    }

    /// <summary>
    /// The options the environment (the process's, or <paramref name="environment"/>) and <paramref name="args"/> give,
    /// or the first problem with them.
    /// </summary>
    public static (T Options, string? Problem) Parse(IReadOnlyList<string> args, Func<string, string?>? environment = null)
    {
        var options = new T();
        if (environment is null)
        {
            // The client's settings files (/etc/hpcdata/client.conf, the user's) beneath the process's variables.
            try { environment = ClientConfig.Load().Beneath(Environment.GetEnvironmentVariable); }
            catch (FormatException e) when (T.WithoutSettingsFile)
            {
                Console.Error.WriteLine($"hpcdata {T.Verb}: warning: {e.Message}; going on without the client's settings files");
                environment = Environment.GetEnvironmentVariable;
            }
            catch (FormatException e) { return (options, e.Message); }
        }
        var groups = options as ISwitchGroups;
        var given = groups?.GivenSwitches ?? new HashSet<string>(StringComparer.OrdinalIgnoreCase);
        var own = SwitchGroup.Of(typeof(T));
        var all = new List<(SwitchGroup Switches, object Target)> { (own, options) };
        all.AddRange((groups?.Groups ?? []).Select(g => (g.Switches, g.Target)));
        // Variables first, each group's own; then the whole command line in one pass of the engine, every value set on
        // the group that declares its switch.
        foreach (var (switches, target) in all)
            if (switches.ApplyEnvironment(target, environment) is { } problem) return (options, problem);
        var parsed = CommandLineEngine.Parse([.. all.SelectMany(g => g.Switches.Syntax)], args);
        if (parsed.Problem is { } bad) return (options, bad);
        if (parsed.UnknownOption is { } unknown)
        {
            var name = unknown.Split('=')[0];
            return (options, $"unknown option '{name}'{Suggestions.DidYouMean(name, all.SelectMany(g => g.Switches.Names))}");
        }
        foreach (var (name, value) in parsed.Values)
        {
            var (switches, target) = all.First(g => g.Switches.Declares(name));
            if (switches.Apply(target, name, value) is { } problem) return (options, problem);
            given.Add(name);
        }
        return (options, own.BindArguments(parsed.Arguments, options, given));
    }

    private static IEnumerable<string> GroupNames(ISwitchGroups? groups) => (groups?.Groups ?? []).SelectMany(g => g.Switches.Names);

    /// <summary>Every switch the verb takes, its own and its groups', for completion.</summary>
    public static IReadOnlyList<string> SwitchNames() =>
        [.. SwitchGroup.Of(typeof(T)).Names.Concat(GroupNames(new T() as ISwitchGroups)).Append("--help").Distinct()];

    public static string Help(string usage, string? summary = null)
    {
        var defaults = new T();
        var own = SwitchGroup.Of(typeof(T));
        var columns = HelpLayout.Columns;
        var sb = new StringBuilder();
        foreach (var line in HelpLayout.Wrap($"{usage} — {summary ?? T.Summary}", columns)) sb.AppendLine(line);
        sb.AppendLine();
        sb.Append("usage: ").Append(usage).Append(own.Arguments is { Length: > 0 } a ? " " + a : "").Append(" [options]").AppendLine(T.Trailing is { Length: > 0 } t ? " " + t : "").AppendLine();
        foreach (var line in own.HelpLines(defaults, columns)) sb.AppendLine(line);
        sb.AppendLine(HelpLayout.Entry("-h, --help", "this text", columns)).AppendLine();
        foreach (var group in (defaults as ISwitchGroups)?.Groups ?? [])
        {
            foreach (var line in HelpLayout.Wrap(group.Title + ":", columns)) sb.AppendLine(line);
            foreach (var line in group.Switches.HelpLines(group.Target, columns)) sb.AppendLine(line);
            sb.AppendLine();
        }
        sb.Append(HelpLayout.Examples(T.Examples, columns));
        return sb.ToString();
    }
}
