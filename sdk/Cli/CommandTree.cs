using System.Diagnostics.CodeAnalysis;
using System.Runtime.InteropServices;
using CommandLine;
using CommandLine.Text;
using Hpc.CommonData.Hosting;

namespace Hpc.CommonData.Cli;

/// <summary>One verb of a program: its name, one line for the verb list, and what runs it with the remaining arguments.</summary>
public sealed record VerbEntry(string Name, string Summary, Func<string[], Task<int>> Run, bool Hidden = false)
{
    /// <summary>A verb whose options type declares its switches (<see cref="IVerbOptions"/>, <see cref="VerbContract{T}"/>).</summary>
    public static VerbEntry For<[DynamicallyAccessedMembers(OptionsType.Members)] TOptions>(string program, Func<TOptions, CancellationToken, Task<int>> run)
        where TOptions : class, IVerbOptions, new() =>
        new(TOptions.Verb, TOptions.Summary, args => VerbContract<TOptions>.RunAsync($"{program} {TOptions.Verb}", args, run));

    /// <summary>A verb whose options type carries CommandLineParser's <see cref="VerbAttribute"/> (the lab's and the samples' verbs).</summary>
    public static VerbEntry Of<[DynamicallyAccessedMembers(OptionsType.Members)] TOptions>(string program, Func<TOptions, CancellationToken, Task<int>> run)
    {
        var verb = typeof(TOptions).GetCustomAttributes(typeof(VerbAttribute), false).Cast<VerbAttribute>().Single();
        return new VerbEntry(verb.Name, verb.HelpText, args => CommandTree.ParseAndRunAsync($"{program} {verb.Name}", args, run, verb.HelpText), verb.Hidden);
    }
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
        if (args is ["--version"]) { Console.Out.WriteLine($"{Program} {typeof(CommandTree).Assembly.GetName().Version}"); return 0; }
        if (args is ["help", var topic, ..]) args = [topic, "--help"];
        var verb = verbs.FirstOrDefault(v => v.Name == args[0]);
        if (verb is null)
        {
            Console.Error.WriteLine($"{Program}: unknown command '{args[0]}' (see {Program} --help)");
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

    public string Help()
    {
        var width = verbs.Where(v => !v.Hidden).Max(v => v.Name.Length) + 2;
        var lines = verbs.Where(v => !v.Hidden).Select(v => $"  {v.Name.PadRight(width)}{v.Summary}");
        return $"{Program} — {summary}\n\nusage: {Program} COMMAND [options]   ({Program} help COMMAND for its options)\n\ncommands:\n" +
               string.Join('\n', lines) + "\n";
    }

    /// <summary>
    /// Parses one verb's options with CommandLineParser and runs it: <c>--help</c> prints the options on stdout (exit 0);
    /// a bad or unknown option is one line on stderr (exit 2). The token is cancelled by SIGINT or SIGTERM
    /// (<see cref="Signals"/>), so a cancelled verb cleans up in its finally blocks and exits 130.
    /// </summary>
    public static async Task<int> ParseAndRunAsync<[DynamicallyAccessedMembers(OptionsType.Members)] TOptions>(string usage, string[] args, Func<TOptions, CancellationToken, Task<int>> run, string? summary = null)
    {
        using var parser = new Parser(s => { s.HelpWriter = null; s.AutoVersion = false; s.CaseInsensitiveEnumValues = true; s.AutoHelp = true; });
        var parsed = parser.ParseArguments<TOptions>(WithLongHelp<TOptions>(args));
        if (parsed is Parsed<TOptions> ok) return await RunCancellableAsync(usage, ct => run(ok.Value, ct));
        var errors = ((NotParsed<TOptions>)parsed).Errors.ToList();
        if (errors.Any(e => e.Tag is ErrorType.HelpRequestedError or ErrorType.HelpVerbRequestedError))
        {
            var help = HelpText.AutoBuild(parsed, h =>
            {
                h.Heading = summary is null ? usage : $"{usage} — {summary}"; h.Copyright = ""; h.AdditionalNewLineAfterOption = false; h.AddDashesToOption = true; h.AutoVersion = false;
                h.MaximumDisplayWidth = 100;
                return h;
            }, e => e);
            Console.Out.WriteLine(help);
            return 0;
        }
        var missing = errors.OfType<MissingRequiredOptionError>().ToList();
        var problem = missing.Count == errors.Count ? $"missing required {string.Join(", ", MissingNames<TOptions>(missing, args))}" : Describe(errors[0], args);
        Console.Error.WriteLine($"{usage}: {problem} (see {usage} --help)");
        return ExitCodes.Usage;
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

    /// <summary>
    /// <c>-h</c> is <c>--help</c>, as on the programs' own command lines (<c>hpcdata stage -h</c>), unless the verb gives
    /// -h a meaning of its own; CommandLineParser knows only <c>--help</c>. Nothing after <c>--</c> is touched: that is
    /// the command a verb runs.
    /// </summary>
    private static string[] WithLongHelp<[DynamicallyAccessedMembers(OptionsType.Members)] TOptions>(string[] args)
    {
        var own = typeof(TOptions).GetProperties().Any(p => p.GetCustomAttributes(typeof(OptionAttribute), true).Cast<OptionAttribute>().Any(o => o.ShortName == "h"));
        if (own) return args;
        var end = Array.IndexOf(args, "--") is var i and >= 0 ? i : args.Length;
        return [.. args[..end].Select(a => a == "-h" ? "--help" : a), .. args[end..]];
    }

    /// <summary>
    /// The switches and arguments missing. CommandLineParser names a missing option but not a missing positional
    /// argument (and reports several as one): positional arguments fill in order, so the missing ones are the required
    /// ones past those given.
    /// </summary>
    private static IEnumerable<string> MissingNames<[DynamicallyAccessedMembers(OptionsType.Members)] TOptions>(List<MissingRequiredOptionError> missing, string[] args)
    {
        var options = typeof(TOptions).GetProperties()
            .SelectMany(p => p.GetCustomAttributes(typeof(OptionAttribute), true).Cast<OptionAttribute>().Select(o => (o, p.PropertyType))).ToList();
        bool TakesValue(string token) => !token.Contains('=') && options.Any(x => x.PropertyType != typeof(bool)
            && (token == "--" + x.o.LongName || x.o.ShortName.Length > 0 && token == "-" + x.o.ShortName));
        var given = 0;
        for (var i = 0; i < args.Length; i++)
        {
            if (args[i] == "--") { given += args.Length - i - 1; break; }
            if (!args[i].StartsWith('-')) given++;
            else if (TakesValue(args[i])) i++;
        }
        var values = typeof(TOptions).GetProperties()
            .SelectMany(p => p.GetCustomAttributes(typeof(ValueAttribute), true).Cast<ValueAttribute>()
                .Select(v => (v.Index, v.Required, Name: (v.MetaName is { Length: > 0 } m ? m : p.Name).ToUpperInvariant())))
            .Where(v => v.Required && v.Index >= given).OrderBy(v => v.Index).Select(v => v.Name).ToList();
        var named = missing.Where(m => m.NameInfo.LongName.Length > 0).Select(m => "--" + m.NameInfo.LongName).ToList();
        if (missing.Any(m => m.NameInfo.LongName.Length == 0)) named.AddRange(values.Count > 0 ? values : ["argument"]);
        return named;
    }

    private static string Describe(Error e, string[] args) => e switch
    {
        // The parser drops the dashes: say the option as it was typed (-x or --x).
        UnknownOptionError u => $"unknown option '{(args.Any(a => a == "--" + u.Token || a.StartsWith("--" + u.Token + "=", StringComparison.Ordinal)) ? "--" : "-")}{u.Token}'",
        MissingRequiredOptionError m => $"missing required {(m.NameInfo.LongName.Length > 0 ? "--" + m.NameInfo.LongName : "argument")}",
        BadFormatConversionError b => $"bad value for --{b.NameInfo.LongName}",
        MissingValueOptionError m => $"--{m.NameInfo.LongName} needs a value",
        SequenceOutOfRangeError s => $"wrong number of values for --{s.NameInfo.LongName}",
        RepeatedOptionError r => $"--{r.NameInfo.LongName} given twice",
        UnknownOptionError or BadVerbSelectedError => "unknown command",
        _ when e.Tag == ErrorType.MissingValueOptionError => "an option needs a value",
        _ => e.Tag switch
        {
            ErrorType.BadFormatTokenError => $"cannot read '{((BadFormatTokenError)e).Token}'",
            _ => e.Tag.ToString(),
        },
    };
}

/// <summary>The one way a verb learns of SIGINT (Ctrl-C) and SIGTERM (scancel, job-manager stop): its token is cancelled.</summary>
public static class Signals
{
    public static IDisposable CancelOn(CancellationTokenSource cancel)
    {
        void Handler(PosixSignalContext c) { c.Cancel = true; cancel.Cancel(); }
        var registrations = new List<IDisposable> { PosixSignalRegistration.Create(PosixSignal.SIGINT, Handler) };
        if (!OperatingSystem.IsWindows()) registrations.Add(PosixSignalRegistration.Create(PosixSignal.SIGTERM, Handler));
        return new Registrations(registrations);
    }

    private sealed class Registrations(List<IDisposable> all) : IDisposable
    {
        public void Dispose() { foreach (var r in all) r.Dispose(); }
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

    /// <summary>The command ran and failed; the message says why.</summary>
    public static CommandException Failed(string message) => new(ExitCodes.Failed, message);

    /// <summary>Cancelled by a signal after cleaning up; the message says what was left.</summary>
    public static CommandException Cancelled(string message) => new(ExitCodes.Cancelled, message);
}

/// <summary>Exit codes of every command, decided here only.</summary>
public static class ExitCodes
{
    public const int Ok = 0;
    /// <summary>The command ran and failed (the line on stderr says why: not found, integrity, unavailable, no space …).</summary>
    public const int Failed = 1;
    /// <summary>The command line was wrong; nothing was done.</summary>
    public const int Usage = 2;
    /// <summary>Cancelled by SIGINT / SIGTERM after cleaning up (128 + SIGINT, as shells report it).</summary>
    public const int Cancelled = 130;

    /// <summary>Failures that are the world's fault, not a bug: reported as one line, no stack trace.</summary>
    public static bool IsExpected(Exception e) => e is CommonDataException or IOException or UnauthorizedAccessException or TimeoutException
        or InvalidDataException or FormatException or ArgumentException or InvalidOperationException or System.Text.Json.JsonException
        or System.Net.Sockets.SocketException;

    /// <summary>Writes <c>who: message</c> on stderr and returns the exit code for <paramref name="e"/>.</summary>
    public static int Report(string who, Exception e)
    {
        var error = CommonDataException.From(e);
        Console.Error.WriteLine($"{who}: {e.Message}");
        return e is FormatException or ArgumentException || error.Code == ErrorCode.BadRequest && e is not CommonDataException ? Usage : Failed;
    }
}

/// <summary>What the command tree reads of an options type by reflection, so a trimmed or native build keeps it.</summary>
internal static class OptionsType
{
    public const DynamicallyAccessedMemberTypes Members =
        DynamicallyAccessedMemberTypes.PublicProperties | DynamicallyAccessedMemberTypes.PublicParameterlessConstructor;
}
