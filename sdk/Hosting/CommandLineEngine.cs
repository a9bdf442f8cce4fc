using System.CommandLine;
using System.CommandLine.Parsing;

namespace Hpc.CommonData.Hosting;

/// <summary>A switch as the command line spells it: its name, its short form, and whether it is an on/off flag.</summary>
public readonly record struct SwitchSyntax(string Name, string? Alias, bool IsFlag);

/// <summary>
/// What one command line gave: each switch's values in the order given (a flag given bare: <c>true</c>), the
/// positional arguments (those after <c>--</c> included), the first word that looked like an unknown option, or the
/// first problem.
/// </summary>
public sealed record ParsedSwitches(IReadOnlyList<KeyValuePair<string, string>> Values, IReadOnlyList<string> Arguments, string? UnknownOption, string? Problem);

/// <summary>
/// The one command-line engine of every program and verb, on System.CommandLine: the switches declared with
/// <see cref="SwitchAttribute"/> become its options, and its parser pairs them with their values (<c>--name value</c>,
/// <c>--name=value</c>, <c>--name:value</c>, short forms, a switch given again), expands response files
/// (<c>@file</c>, one token per line) and ends the options at <c>--</c>. What it hands back is text: the settings
/// grammar (<see cref="SettingValues"/>) reads every value, whichever of command line, environment or settings file it
/// came from. Two conventions of ours it is told: a flag takes an on/off value after it only when that word is one
/// (<c>--tls</c>, <c>--tls off</c>, <c>--link-probe=no</c>), and switch names are not case-sensitive.
/// </summary>
public static class CommandLineEngine
{
    public static ParsedSwitches Parse(IReadOnlyList<SwitchSyntax> switches, IReadOnlyList<string> args)
    {
        var byName = new Dictionary<string, SwitchSyntax>(StringComparer.OrdinalIgnoreCase);
        var byAlias = new Dictionary<string, SwitchSyntax>(StringComparer.Ordinal);
        foreach (var s in switches)
        {
            byName[s.Name] = s;
            if (s.Alias is { } alias) byAlias[alias] = s;
        }
        SwitchSyntax? Find(string word) => byAlias.TryGetValue(word, out var a) ? a : byName.TryGetValue(word, out var n) ? n : null;

        // Everything after "--" is an argument whatever it looks like; the parser is not shown it.
        var end = args.Count;
        for (var i = 0; i < args.Count; i++) if (args[i] == "--") { end = i; break; }
        var tokens = new List<string>(end + 1);
        for (var i = 0; i < end; i++)
        {
            var word = args[i];
            var eq = word.StartsWith("--", StringComparison.Ordinal) ? word.IndexOf('=') : -1;
            var name = eq > 2 ? word[..eq] : word;
            if (Find(name) is not { } s) { tokens.Add(word); continue; }
            tokens.Add(s.Name);
            if (!s.IsFlag)
            {
                // A value that looks like a switch is taken only in the name=value form: "--name --count 1" is a
                // forgotten value, not a name spelled "--count".
                if (eq > 2) tokens.Add(word[(eq + 1)..]);
                else if (i + 1 >= end || args[i + 1].StartsWith("--", StringComparison.Ordinal)) return new([], [], null, $"{s.Name} needs a value");
                else tokens.Add(args[++i]);
                continue;
            }
            // The parser reads only true/false after a flag; every other spelling of on and off is handed to it as those,
            // and a word that is neither stays what it is: the next argument.
            if (eq > 2)
            {
                if (!SettingValues.TryParseBool(word[(eq + 1)..], out var given))
                    return new([], [], null, $"{s.Name}: {SettingValues.Check(typeof(bool), word[(eq + 1)..])}");
                tokens.Add(given ? "true" : "false");
            }
            else if (i + 1 < end && SettingValues.TryParseBool(args[i + 1], out var on))
            {
                tokens.Add(on ? "true" : "false");
                i++;
            }
        }

        // A plain command, not a root one: help, version and completion are ours (CommandTree), and no word is a directive.
        var command = new Command("program");
        var options = new Dictionary<string, Option>(StringComparer.Ordinal);
        foreach (var s in switches)
        {
            if (options.ContainsKey(s.Name)) continue;
            Option option = s.IsFlag
                ? new Option<bool>(s.Name) { Arity = ArgumentArity.ZeroOrOne }
                // Given again, a switch's last value is the one that counts: every occurrence is kept, one value each.
                : new Option<string[]>(s.Name) { Arity = new ArgumentArity(1, 100_000), AllowMultipleArgumentsPerToken = false };
            if (s.Alias is { } alias) option.Aliases.Add(alias);
            command.Options.Add(option);
            options[s.Name] = option;
        }
        var rest = new Argument<string[]>("arguments") { Arity = ArgumentArity.ZeroOrMore };
        command.Arguments.Add(rest);
        var result = command.Parse(tokens);

        foreach (var error in result.Errors)
        {
            var at = options.FirstOrDefault(o => error.Message.Contains($"'{o.Key}'", StringComparison.Ordinal));
            return new([], [], null, at.Key is not null && error.Message.StartsWith("Required argument missing", StringComparison.Ordinal)
                ? $"{at.Key} needs a value"
                : error.Message);
        }
        var values = new List<KeyValuePair<string, string>>();
        foreach (var (name, option) in options)
        {
            if (result.GetResult(option) is not { Implicit: false } found) continue;
            if (option is Option<bool>) values.Add(new(name, found.Tokens.Count == 0 ? "true" : found.Tokens[^1].Value));
            else foreach (var token in found.Tokens) values.Add(new(name, token.Value));
        }
        var arguments = result.GetResult(rest)?.Tokens.Select(t => t.Value).ToList() ?? [];
        var unknown = arguments.FirstOrDefault(a => a.Length > 1 && a[0] == '-');
        arguments.AddRange(args.Skip(end + 1));
        return new(values, arguments, unknown, null);
    }
}
