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

/// <summary>A verb's resolved options, the first problem with them, and where each setting came from.</summary>
public sealed record VerbSettings<T>(T Options, string? Problem, SettingOrigins Origins)
{
    public void Deconstruct(out T options, out string? problem) => (options, problem) = (Options, Problem);
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
    /// The options the client's settings files, the environment and <paramref name="args"/> give, resolved as every
    /// program's are (<see cref="SettingsResolver"/>), with where each came from; or the first problem with them. The
    /// process's variables and files by default; <paramref name="environment"/> (with <paramref name="files"/>, none by
    /// default) stands for both.
    /// </summary>
    public static VerbSettings<T> Parse(IReadOnlyList<string> args, Func<string, string?>? environment = null, ClientConfig? files = null)
    {
        var options = new T();
        files ??= ClientConfig.None;
        if (environment is null)
        {
            environment = Environment.GetEnvironmentVariable;
            try { files = ClientConfig.Load(); }
            catch (FormatException e) when (T.WithoutSettingsFile)
            {
                Console.Error.WriteLine($"hpcdata {T.Verb}: warning: {e.Message}; going on without the client's settings files");
            }
            catch (FormatException e) { return new(options, e.Message, new SettingOrigins()); }
        }
        var groups = options as ISwitchGroups;
        var own = SwitchGroup.Of(typeof(T));
        List<SettingSlot> slots = [.. SettingSlot.Of(options), .. (groups?.Groups ?? []).SelectMany(g => SettingSlot.Of(g.Target, g.Only))];
        var resolved = SettingsResolver.Resolve(slots, args, environment, files, groups?.Origins);
        return new(options, resolved.Problem ?? own.BindArguments(resolved.Arguments, options, resolved.Origins), resolved.Origins);
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
