using System.Diagnostics.CodeAnalysis;
using System.Runtime.InteropServices;
using Hpc.CommonData.Hosting;

namespace Hpc.CommonData.Cli;

/// <summary>One verb of a program: its name, one line for the verb list, and what runs it with the remaining arguments.</summary>
/// <param name="Switches">What completion offers after the verb (null: files only).</param>
/// <param name="HelpText">The verb's help, for a verb that runs another program (which prints it there): the manual page takes it from here.</param>
public sealed record VerbEntry(string Name, string Summary, Func<string[], Task<int>> Run, bool Hidden = false, IReadOnlyList<string>? Switches = null,
    Func<string>? HelpText = null)
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
            var usage = $"usage: {Program} completion bash|zsh|fish\n\nPrints a completion script for {Program}'s commands and switches; load it with\n" +
                        $"  bash: source <({Program} completion bash)\n  zsh:  source <({Program} completion zsh)   (after compinit)\n  fish: {Program} completion fish | source\n\n  {"-h, --help",-28} this text\n";
            if (args is [_, "--help" or "-h"]) { Console.Out.Write(usage); return ExitCodes.Ok; }
            var script = args is [_, var shell] ? shell switch { "bash" => BashCompletion(), "zsh" => ZshCompletion(), "fish" => FishCompletion(), _ => null } : null;
            if (script is null) { Console.Error.WriteLine($"{Program} completion: give the shell: {Program} completion bash, zsh or fish"); return ExitCodes.Usage; }
            Console.Out.Write(script);
            return ExitCodes.Ok;
        }
        if (args is ["man", ..])
        {
            if (args is [_, "--help" or "-h"]) { Console.Out.Write($"usage: {Program} man\n\nPrints {Program}'s manual page (troff), made from the help of every command:\n  {Program} man > /usr/local/share/man/man1/{Program}.1\n\n  {"-h, --help",-28} this text\n"); return ExitCodes.Ok; }
            Console.Out.Write(await ManPageAsync());
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
        // The longest of the verbs and "completion SHELL", so every summary starts in one column after two spaces.
        var width = Math.Max(Shown.Max(v => v.Name.Length), "completion SHELL".Length) + 2;
        var columns = HelpLayout.Columns;
        // Each summary wrapped under itself, as a verb's switches are.
        string Entry(string name, string text) =>
            $"  {name.PadRight(width)}" + string.Join("\n" + new string(' ', width + 2), HelpLayout.Wrap(text, Math.Max(20, columns - width - 2)));
        var lines = Shown.Select(v => Entry(v.Name, v.Summary));
        return string.Join('\n', HelpLayout.Wrap($"{Program} — {summary}", columns)) +
               $"\n\nusage: {Program} COMMAND [options]   ({Program} help COMMAND for its options)\n\ncommands:\n" +
               string.Join('\n', lines) + "\n\n" + Entry("completion SHELL", $"print a completion script: bash, zsh or fish (source <({Program} completion bash))") + "\n" +
               Entry("man", $"print the manual page ({Program} man > /usr/local/share/man/man1/{Program}.1)") + "\n";
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

    private IEnumerable<VerbEntry> Shown => verbs.Where(v => !v.Hidden);

    /// <summary>A zsh completion function: the verbs with their summaries, each verb's switches, file names for the rest.</summary>
    public string ZshCompletion()
    {
        var command = Program.Split(' ')[0];
        var function = "_" + new string(command.Select(c => char.IsAsciiLetterOrDigit(c) ? c : '_').ToArray());
        var sb = new System.Text.StringBuilder();
        sb.Append($"#compdef {command}\n# zsh completion for {command}: source <({command} completion zsh), after compinit\n");
        sb.Append($"{function}() {{\n  local -a verbs\n  verbs=(\n");
        foreach (var v in Shown) sb.Append($"    {ZshQuote($"{v.Name}:{v.Summary}")}\n");
        sb.Append($"    {ZshQuote("help:the options of a command")}\n    {ZshQuote("completion:print a completion script (bash, zsh, fish)")}\n    {ZshQuote($"man:print {command}'s manual page")}\n  )\n");
        sb.Append("  if (( CURRENT == 2 )); then _describe -t commands command verbs; return; fi\n");
        sb.Append("  if [[ $PREFIX != -* ]]; then _files; return; fi\n");
        sb.Append("  case $words[2] in\n");
        foreach (var v in verbs.Where(v => v.Switches is { Count: > 0 }))
            sb.Append($"    {v.Name}) compadd -- {string.Join(' ', v.Switches!)};;\n");
        sb.Append("  esac\n}\n");
        sb.Append($"compdef {function} {command}\n");
        return sb.ToString();
    }

    /// <summary>Fish completions: the verbs with their summaries while none is given, then that verb's switches.</summary>
    public string FishCompletion()
    {
        var command = Program.Split(' ')[0];
        var sb = new System.Text.StringBuilder();
        sb.Append($"# fish completion for {command}: {command} completion fish | source\n");
        var names = string.Join(' ', Shown.Select(v => v.Name).Append("help").Append("completion").Append("man"));
        foreach (var v in Shown)
            sb.Append($"complete -c {command} -f -n 'not __fish_seen_subcommand_from {names}' -a {v.Name} -d {FishQuote(v.Summary)}\n");
        sb.Append($"complete -c {command} -f -n 'not __fish_seen_subcommand_from {names}' -a help -d 'the options of a command'\n");
        sb.Append($"complete -c {command} -f -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'\n");
        foreach (var v in verbs.Where(v => v.Switches is { Count: > 0 }))
            foreach (var sw in v.Switches!)
                sb.Append(sw.StartsWith("--", StringComparison.Ordinal)
                    ? $"complete -c {command} -n '__fish_seen_subcommand_from {v.Name}' -l {sw[2..]}\n"
                    : $"complete -c {command} -n '__fish_seen_subcommand_from {v.Name}' -s {sw.TrimStart('-')}\n");
        return sb.ToString();
    }

    private static string ZshQuote(string s) => "'" + s.Replace("'", "'\\''") + "'";

    private static string FishQuote(string s) => "'" + s.Replace("\\", "\\\\").Replace("'", "\\'") + "'";

    /// <summary>
    /// The manual page (man(7) macros): the program's summary and commands, then each command's own help as it prints
    /// it (a command run as another program says where its help is), the exit codes and the files.
    /// </summary>
    public async Task<string> ManPageAsync()
    {
        var command = Program.Split(' ')[0];
        var sb = new System.Text.StringBuilder();
        // The build's date: the program's assembly, or the native executable that has none.
        var built = Path.Combine(AppContext.BaseDirectory, command + ".dll") is var dll && File.Exists(dll) ? dll : Environment.ProcessPath ?? AppContext.BaseDirectory;
        var date = File.GetLastWriteTimeUtc(built).ToString("yyyy-MM-dd", System.Globalization.CultureInfo.InvariantCulture);
        sb.Append($".TH {command.ToUpperInvariant()} 1 \"{date}\" \"{command} {Version.Split('+')[0]}\" \"User Commands\"\n");
        sb.Append($".SH NAME\n{command} \\- {Troff(summary)}\n");
        sb.Append($".SH SYNOPSIS\n.B {command}\n.I COMMAND\n.RI [ options ]\n.br\n.B {command} help\n.I COMMAND\n");
        sb.Append(".SH COMMANDS\n");
        foreach (var v in Shown) sb.Append($".TP\n.B {v.Name}\n{Troff(v.Summary)}\n");
        sb.Append($".TP\n.B completion bash|zsh|fish\nPrint a completion script for the shell.\n.TP\n.B man\nPrint this page.\n");
        foreach (var v in Shown.Where(v => v.Switches is not null))
        {
            var help = v.HelpText is { } text ? text() : await CaptureAsync(() => v.Run(["--help"]));
            sb.Append($".SH \"{command.ToUpperInvariant()} {v.Name.ToUpperInvariant()}\"\n");
            if (help.Trim().Length == 0) { sb.Append($"See\n.B {command} {v.Name} \\-\\-help\n"); continue; }
            sb.Append(".nf\n");
            foreach (var line in help.TrimEnd().Split('\n')) sb.Append(Troff(line)).Append('\n');
            sb.Append(".fi\n");
        }
        sb.Append(".SH \"EXIT STATUS\"\n0 done; 2 a usage error; 65 corrupted data; 66 not found; 69 a host or the agent unavailable; 73 cannot create (no space, a data directory that is a file, a port in use); " +
                  "74 an I/O error; 75 try later (a timeout, a limit, a login refused by a rate limit); 76 a protocol error; 77 denied; 130 interrupted; 1 anything else " +
                  "(the table: docs/jobs.md, \"Exit codes\").\n");
        sb.Append($".SH FILES\n.TP\n.I {ClientConfig.SiteFile}\nThe site's client settings (cache hosts, account, password file, CA).\n" +
                  $".TP\n.I ~/.config/{command}/client.conf\nThe user's own, over the site's.\n");
        return sb.ToString();
    }

    /// <summary>What <paramref name="run"/> writes on stdout, for help text that only knows how to print itself.</summary>
    private static async Task<string> CaptureAsync(Func<Task<int>> run)
    {
        var saved = Console.Out;
        var text = new StringWriter();
        Console.SetOut(text);
        try { await run(); }
        catch (Exception e) when (ExitCodes.IsExpected(e)) { }
        finally { Console.SetOut(saved); }
        return text.ToString();
    }

    /// <summary>Text as troff prints it: backslashes escaped, a leading dot or quote not read as a request.</summary>
    private static string Troff(string text)
    {
        var sb = new System.Text.StringBuilder(text.Length + 8);
        if (text.StartsWith('.') || text.StartsWith('\'')) sb.Append("\\&");
        foreach (var c in text)
            sb.Append(c switch
            {
                '\\' => "\\e",
                '-' => "\\-",
                // Outside ASCII, by code point: groff reads \[uXXXX] whatever the page's encoding is taken to be.
                > '~' => $"\\[u{(int)c:X4}]",
                _ => c.ToString(),
            });
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
