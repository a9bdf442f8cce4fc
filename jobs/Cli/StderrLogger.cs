using Microsoft.Extensions.Logging;

namespace Hpc.Jobs.Cli;

/// <summary>
/// Warnings and errors of a short-lived command, one line each on stderr. The console logger provider costs a
/// background thread, options monitoring and tens of milliseconds of start-up per process — paid by every worker of a
/// node starting at once — for a command that logs nothing on its good path.
/// </summary>
public sealed class StderrLogger(string prefix, LogLevel minimum = LogLevel.Warning) : ILogger
{
    public IDisposable? BeginScope<TState>(TState state) where TState : notnull => null;

    public bool IsEnabled(LogLevel logLevel) => logLevel >= minimum && logLevel != LogLevel.None;

    public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter)
    {
        if (!IsEnabled(logLevel)) return;
        var level = logLevel switch { LogLevel.Warning => "warning", LogLevel.Error => "error", LogLevel.Critical => "critical", _ => logLevel.ToString().ToLowerInvariant() };
        Console.Error.WriteLine($"{prefix}: {level}: {formatter(state, exception)}{(exception is null ? "" : $" ({exception.Message})")}");
    }
}
