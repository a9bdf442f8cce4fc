using Microsoft.Extensions.Logging;

namespace Hpc.CommonData.Hosting;

/// <summary>
/// The log of a command a user typed (<c>hpcdata stage</c>, <c>get</c>, <c>worker</c>): warnings and errors, one line
/// each on stderr, <c>prefix: warning: message</c>, and each problem once. A host that is down is retried several times
/// per request, and each retry is a warning; the daemons log every one, but a user wants to read that the host is
/// down once, then the command's own one-line outcome. So a message is written once per template and host (its
/// <c>{Host}</c> value), or once per text when it names none. Nothing else: the console logger provider's two-line
/// blocks and its background thread are for services.
/// </summary>
public sealed class LineLogger(string prefix, LogLevel minimum = LogLevel.Warning) : ILogger
{
    private readonly HashSet<string> _said = [];

    public IDisposable? BeginScope<TState>(TState state) where TState : notnull => null;

    public bool IsEnabled(LogLevel logLevel) => logLevel >= minimum && logLevel != LogLevel.None;

    public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter)
    {
        if (!IsEnabled(logLevel)) return;
        var message = formatter(state, exception);
        lock (_said)
            if (!_said.Add(ProblemOf(state, message))) return;
        var level = logLevel switch { LogLevel.Warning => "warning", LogLevel.Error => "error", LogLevel.Critical => "critical", _ => logLevel.ToString().ToLowerInvariant() };
        Console.Error.WriteLine($"{prefix}: {level}: {message}{(exception is null ? "" : $" ({exception.Message})")}".ReplaceLineEndings(" "));
    }

    private static string ProblemOf<TState>(TState state, string message)
    {
        if (state is not IReadOnlyList<KeyValuePair<string, object?>> values) return message;
        string? template = null, host = null;
        foreach (var (key, value) in values)
        {
            if (key == "{OriginalFormat}") template = value as string;
            else if (key == "Host") host = value?.ToString();
        }
        return template is not null && host is not null ? $"{template}\n{host}" : message;
    }

}
