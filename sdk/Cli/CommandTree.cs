using System.Diagnostics.CodeAnalysis;
using System.Runtime.InteropServices;
using Hpc.CommonData.Hosting;

namespace Hpc.CommonData.Cli;

/// <summary>One verb of a program: its name, one line for the verb list, and what runs it with the remaining arguments.</summary>
/// <param name="Switches">What completion offers after the verb (null: files only).</param>
public sealed record VerbEntry(string Name, string Summary, Func<string[], Task<int>> Run, bool Hidden = false, IReadOnlyList<string>? Switches = null)
{
    /// <summary>A verb whose options type declares its switches (<see cref="IVerbOptions"/>, <see cref="VerbContract{T}"/>).</summary>
    public static VerbEntry For<[DynamicallyAccessedMembers(OptionsType.Members)] TOptions>(string program, Func<TOptions, CancellationToken, Task<int>> run)
        where TOptions : class, IVerbOptions, new() =>
        new(TOptions.Verb, TOptions.Summary, args => VerbContract<TOptions>.RunAsync($"{program} {TOptions.Verb}", args, run), TOptions.Hidden,
            VerbContract<TOptions>.SwitchNames());
}

/// <summary>
/// The command tree of a program (<c>hpcdata</c>, <c>hpcdata-bench</c>, <c>hpcdata-sample</c>): every verb listed by
/// <c>--help</c> on stdout with exit 0; <c>help VERB</c> is <c>VERB --help</c>; an unknown verb or option is one line on
/// stderr and exit 2; a failure is one line and exit 1 (<see cref="ExitCodes"/>); never a stack trace for bad input.
/// </summary>
public sealed class CommandTree(string program, string summary, IReadOnlyList<VerbEntry> verbs)
{
    public string Program { get; } = program;

    public async Task<int> RunAsync(string[] args)
    {
        if (args is [] or ["--help"] or ["-h"] or ["help"]) { Console.Out.Write(Help()); return 0; }
        if (args is ["--version"]) { Console.Out.WriteLine($"{Program} {Version}"); return 0; }
        if (args is ["help", var topic, ..]) args = [topic, "--help"];
        if (args is ["completion", ..])
        {
            var usage = $"usage: {Program} completion bash\n\nPrints a bash completion script for {Program}'s commands and switches; load it with\n  source <({Program} completion bash)\n\n  {"-h, --help",-28} this text\n";
            if (args is [_, "--help" or "-h"]) { Console.Out.Write(usage); return ExitCodes.Ok; }
            if (args is not [_, "bash"]) { Console.Error.WriteLine($"{Program} completion: give the shell: {Program} completion bash"); return ExitCodes.Usage; }
            Console.Out.Write(BashCompletion());
            return ExitCodes.Ok;
        }
        var verb = verbs.FirstOrDefault(v => v.Name == args[0]);
        if (verb is null)
        {
            var hint = Suggestions.DidYouMean(args[0], verbs.Where(v => !v.Hidden).Select(v => v.Name));
            Console.Error.WriteLine($"{Program}: unknown command '{args[0]}'{hint} (see {Program} --help)");
            return ExitCodes.Usage;
        }
        try
        {
            return await verb.Run(args[1..]);
        }
        catch (Exception e) when (ExitCodes.IsExpected(e))
        {
            return ExitCodes.Report($"{Program} {verb.Name}", e);
        }
    }

    /// <summary>The release and the commit it was built from (<c>1.0.0+3f2a…</c>), as the package's metadata records them.</summary>
    public static string Version =>
        typeof(CommandTree).Assembly.GetCustomAttributes(typeof(System.Reflection.AssemblyInformationalVersionAttribute), false)
            .OfType<System.Reflection.AssemblyInformationalVersionAttribute>().FirstOrDefault()?.InformationalVersion
        ?? typeof(CommandTree).Assembly.GetName().Version?.ToString(3) ?? "unknown";

    public string Help()
    {
        // The longest of the verbs and "completion bash", so every summary starts in one column after two spaces.
        var width = Math.Max(verbs.Where(v => !v.Hidden).Max(v => v.Name.Length), "completion bash".Length) + 2;
        var lines = verbs.Where(v => !v.Hidden).Select(v => $"  {v.Name.PadRight(width)}{v.Summary}");
        return $"{Program} — {summary}\n\nusage: {Program} COMMAND [options]   ({Program} help COMMAND for its options)\n\ncommands:\n" +
               string.Join('\n', lines) + $"\n\n  {"completion bash".PadRight(width)}print a bash completion script (source <({Program} completion bash))\n";
    }

    /// <summary>
    /// A bash completion function for the program: the verbs, then each verb's switches (its own and its groups'), and
    /// file names for everything else. Sourced from a profile (<c>source &lt;(hpcdata completion bash)</c>).
    /// </summary>
    public string BashCompletion()
    {
        var command = Program.Split(' ')[0];
        var function = "_" + new string(command.Select(c => char.IsAsciiLetterOrDigit(c) ? c : '_').ToArray());
        var sb = new System.Text.StringBuilder();
        sb.Append($"# bash completion for {command}: source <({command} completion bash)\n");
        sb.Append($"{function}() {{\n  local cur=${{COMP_WORDS[COMP_CWORD]}}\n");
        sb.Append($"  if [ \"$COMP_CWORD\" -eq 1 ]; then COMPREPLY=($(compgen -W \"{string.Join(' ', verbs.Where(v => !v.Hidden).Select(v => v.Name).Append("help").Append("completion"))}\" -- \"$cur\")); return; fi\n");
        sb.Append("  case \"$cur\" in -*) ;; *) COMPREPLY=($(compgen -f -- \"$cur\")); return;; esac\n");
        sb.Append("  case \"${COMP_WORDS[1]}\" in\n");
        foreach (var v in verbs.Where(v => v.Switches is { Count: > 0 }))
            sb.Append($"    {v.Name}) COMPREPLY=($(compgen -W \"{string.Join(' ', v.Switches!)}\" -- \"$cur\"));;\n");
        sb.Append("  esac\n}\n");
        sb.Append($"complete -o default -F {function} {command}\n");
        return sb.ToString();
    }

    /// <summary>
    /// Runs a parsed verb with a token SIGINT or SIGTERM cancel (<see cref="Signals"/>): a cancelled verb cleans up in
    /// its finally blocks and exits 130; a <see cref="CommandException"/> is one line and its exit code.
    /// </summary>
    public static async Task<int> RunCancellableAsync(string usage, Func<CancellationToken, Task<int>> run)
    {
        using var cancel = new CancellationTokenSource();
        using var signals = Signals.CancelOn(cancel);
        try
        {
            return await run(cancel.Token);
        }
        catch (OperationCanceledException) when (cancel.IsCancellationRequested)
        {
            Console.Error.WriteLine($"{usage}: cancelled");
            return ExitCodes.Cancelled;
        }
        catch (CommandException e)
        {
            Console.Error.WriteLine($"{usage}: {e.Message}");
            return e.ExitCode;
        }
    }
}

/// <summary>
/// A verb's failure with the exit code it means (<see cref="ExitCodes"/>): the verb throws it, and the command tree
/// writes <c>program verb: message</c> on stderr and exits with the code. Nothing else decides a verb's exit code.
/// </summary>
public sealed class CommandException : Exception
{
    private CommandException(int exitCode, string message) : base(message) => ExitCode = exitCode;

    public int ExitCode { get; }

    /// <summary>The command line (or what the environment gave in its place) was wrong; nothing was done.</summary>
    public static CommandException Usage(string message) => new(ExitCodes.Usage, message);

    /// <summary>The command ran and failed; the message says why, <paramref name="kind"/> decides the exit code.</summary>
    public static CommandException Failed(string message, ErrorCode kind = ErrorCode.Internal) => new(ExitCodes.For(kind), message);

    /// <summary>The command failed with <paramref name="e"/>: its kind decides the exit code; the message is its own or <paramref name="message"/>.</summary>
    public static CommandException From(Exception e, string? message = null) => new(ExitCodes.Of(e), message ?? e.Message);

    /// <summary>Cancelled by a signal after cleaning up; the message says what was left.</summary>
    public static CommandException Cancelled(string message) => new(ExitCodes.Cancelled, message);
}

/// <summary>What the command tree reads of an options type by reflection, so a trimmed or native build keeps it.</summary>
internal static class OptionsType
{
    public const DynamicallyAccessedMemberTypes Members =
        DynamicallyAccessedMemberTypes.PublicProperties | DynamicallyAccessedMemberTypes.PublicParameterlessConstructor;
}
