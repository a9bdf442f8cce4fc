using System.Diagnostics;
using Hpc.CommonData.Agent;

namespace Hpc.CommonData.Cli;

/// <summary>
/// One self-overwriting line on stderr while bytes move — what, how much of how much, and the rate — as curl and rsync
/// show one. Only on a terminal (<see cref="ForTerminal"/>): in a job's log or a pipe a carriage-return line is noise,
/// and the verb's own summary line says what was done.
/// </summary>
public sealed class ProgressLine
{
    private readonly TextWriter _to;
    private readonly Stopwatch _clock = Stopwatch.StartNew();
    private readonly object _gate = new();
    private long? _lastShownMs;
    private (long Done, long Ms)? _first;
    private int _width;

    private ProgressLine(TextWriter to) => _to = to;

    /// <summary>A line on stderr when stderr is a terminal; null otherwise, so callers write <c>progress?.Show(…)</c>.</summary>
    public static ProgressLine? ForTerminal() => Console.IsErrorRedirected ? null : new ProgressLine(Console.Error);

    /// <summary>As <see cref="ForTerminal()"/>, and null too when the verb was given <c>--quiet</c> (<see cref="Hosting.QuietSwitch"/>).</summary>
    public static ProgressLine? ForTerminal(bool quiet) => quiet ? null : ForTerminal();

    /// <summary>A line on <paramref name="to"/> whatever it is (tests, or a caller that has decided itself).</summary>
    public static ProgressLine To(TextWriter to) => new(to);

    /// <summary>
    /// Shows <paramref name="done"/> of <paramref name="total"/> bytes (total 0: unknown) at most four times a second;
    /// the rate is over what this line has seen move, so a copy already half there is not counted as fast.
    /// </summary>
    public void Show(string what, long done, long total, bool force = false)
    {
        lock (_gate)
        {
            var now = _clock.ElapsedMilliseconds;
            _first ??= (done, now);
            if (!force && _lastShownMs is { } last && now - last < 250) return;
            _lastShownMs = now;
            var seconds = (now - _first.Value.Ms) / 1000.0;
            var rate = seconds >= 0.2 ? (done - _first.Value.Done) / seconds : double.NaN;
            Write(Text(what, done, total, rate));
        }
    }

    /// <summary>The line's words: <c>fetching risk/a: 42.0% 108 MiB of 256 MiB, 95.3 MiB/s</c>.</summary>
    public static string Text(string what, long done, long total, double bytesPerSecond)
    {
        var amount = total > 0
            ? $"{Math.Min(100.0, 100.0 * done / total).ToString("0.0", System.Globalization.CultureInfo.InvariantCulture)}% {ByteSize.Format(done)} of {ByteSize.Format(total)}"
            : ByteSize.Format(done);
        return $"{what}: {amount}{(double.IsFinite(bytesPerSecond) && bytesPerSecond >= 0 ? ", " + ByteRate.Format(bytesPerSecond) : "")}";
    }

    /// <summary>A fetch's progress reports (<see cref="Fetch.FetchProgress"/>) shown on this line as <paramref name="what"/>.</summary>
    public IProgress<Fetch.FetchProgress> Fetching(string what) => new FetchReports(this, what);

    /// <summary>Shown as they come, on the fetch's threads (<see cref="Show"/> is safe there): not posted elsewhere as <see cref="Progress{T}"/> would.</summary>
    private sealed class FetchReports(ProgressLine line, string what) : IProgress<Fetch.FetchProgress>
    {
        public void Report(Fetch.FetchProgress value) => line.Show(what, value.BytesDone, value.TotalBytes);
    }

    /// <summary>Starts the next stage on the same line (e.g. writing after fetching): its rate is its own.</summary>
    public void Restart()
    {
        lock (_gate) { _first = null; _lastShownMs = null; }
    }

    /// <summary>Removes the line, so what is printed next starts at the margin.</summary>
    public void Clear()
    {
        lock (_gate)
        {
            if (_width == 0) return;
            _to.Write("\r" + new string(' ', _width) + "\r");
            _to.Flush();
            _width = 0;
        }
    }

    private void Write(string text)
    {
        // Padded over what the last line left, so a shorter line leaves no tail of the longer one.
        _to.Write("\r" + text.PadRight(_width));
        _to.Flush();
        _width = Math.Max(_width, text.Length);
    }
}

/// <summary>
/// Follows a fetch by this node's agent through its status (bytes done of the copy), onto a <see cref="ProgressLine"/>,
/// until disposed. Nothing is shown when no agent answers or the copy is already complete.
/// </summary>
public sealed class AgentFetchProgress : IAsyncDisposable
{
    private readonly CancellationTokenSource _stop = new();
    private readonly Task _loop;

    public AgentFetchProgress(ProgressLine line, string pipe, string name) => _loop = Task.Run(() => LoopAsync(line, pipe, name));

    private async Task LoopAsync(ProgressLine line, string pipe, string name)
    {
        try
        {
            await using var agent = await AgentClient.ConnectIfListeningAsync(pipe, TimeSpan.FromSeconds(2), _stop.Token);
            while (!_stop.IsCancellationRequested)
            {
                await Task.Delay(250, _stop.Token);
                var copy = (await agent.StatusAsync(_stop.Token)).Copies.FirstOrDefault(c => c.Name == name && c.State != "complete");
                if (copy is not null) line.Show($"fetching {name}", copy.BytesDone, copy.Length);
            }
        }
        catch (Exception e) when (e is OperationCanceledException or IOException or TimeoutException or CommonDataException) { }
    }

    public async ValueTask DisposeAsync()
    {
        _stop.Cancel();
        try { await _loop.WaitAsync(TimeSpan.FromSeconds(2)); } catch (TimeoutException) { }
        _stop.Dispose();
    }
}
