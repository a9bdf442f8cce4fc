using Hpc.CommonData.Hosting;
using Microsoft.Extensions.Logging;

namespace Hpc.CommonData.Cli;

/// <summary>
/// Warnings and errors of a short-lived command, one line each on stderr, each problem once (<see cref="LineLogger"/>,
/// which the stager uses too). The console logger provider costs a background thread, options monitoring and tens of
/// milliseconds of start-up per process — paid by every worker of a node starting at once — for a command that logs
/// nothing on its good path, and writes each warning as a two-line block.
/// </summary>
public sealed class StderrLogger(string prefix, LogLevel minimum = LogLevel.Warning) : ILogger
{
    private readonly LineLogger _lines = new(prefix, minimum);

    public IDisposable? BeginScope<TState>(TState state) where TState : notnull => null;

    public bool IsEnabled(LogLevel logLevel) => _lines.IsEnabled(logLevel);

    public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter) =>
        _lines.Log(logLevel, eventId, state, exception, formatter);
}
