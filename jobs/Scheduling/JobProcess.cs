using System.Collections.Concurrent;
using System.Diagnostics;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Scheduling;

/// <summary>
/// One process of a local job (a service host or the client): any command, its output forwarded line by line with a
/// prefix, a <c>READY …</c> line noted, and the whole process tree stopped on dispose.
/// </summary>
public sealed class JobProcess : IAsyncDisposable
{
    private readonly Process _process;
    private readonly TaskCompletionSource<string> _ready = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private readonly ConcurrentQueue<string> _lines = new();

    public string Name { get; }
    public bool HasExited => _process.HasExited;
    public IEnumerable<string> Output => _lines;

    private JobProcess(string name, Process process, TextWriter? forward)
    {
        Name = name;
        _process = process;
        DataReceivedEventHandler handler = (sender, e) =>
        {
            if (e.Data is null) return;
            if (e.Data.StartsWith("READY", StringComparison.Ordinal)) _ready.TrySetResult(e.Data.Length > 6 ? e.Data[6..].Trim() : "");
            _lines.Enqueue(e.Data);
            while (_lines.Count > 2000) _lines.TryDequeue(out _);
            if (forward is not null) lock (forward) forward.WriteLine($"[{name}] {e.Data}");
        };
        _process.OutputDataReceived += handler;
        _process.ErrorDataReceived += handler;
        _process.Exited += (_, _) => _ready.TrySetException(new InvalidOperationException($"{name} exited before it was ready"));
    }

    /// <summary>
    /// Starts <paramref name="command"/>. A first word of <c>hpcdata</c> runs this build's hpcdata, so jobs work on a
    /// machine where it is not on PATH.
    /// </summary>
    public static JobProcess Start(IReadOnlyList<string> command, IDictionary<string, string?> environment, string name, TextWriter? forward)
    {
        if (command.Count == 0) throw new ArgumentException("empty command");
        string[] program = command[0] == "hpcdata" ? ComponentLocator.Command("hpcdata") : [command[0]];
        var info = new ProcessStartInfo(program[0]);
        foreach (var a in program.Skip(1).Concat(command.Skip(1))) info.ArgumentList.Add(a);
        info.UseShellExecute = false;
        info.RedirectStandardOutput = info.RedirectStandardError = info.RedirectStandardInput = true;
        foreach (var (k, v) in environment) info.Environment[k] = v;
        var p = new Process { StartInfo = info, EnableRaisingEvents = true };
        var job = new JobProcess(name, p, forward);
        try { p.Start(); }
        catch (System.ComponentModel.Win32Exception e) { throw new IOException($"cannot run '{command[0]}': {e.Message}", e); }
        p.StandardInput.Close();
        p.BeginOutputReadLine();
        p.BeginErrorReadLine();
        return job;
    }

    public Task<string> WaitReadyAsync(TimeSpan timeout, CancellationToken ct) => _ready.Task.WaitAsync(timeout, ct);

    public async Task<int> WaitForExitAsync(CancellationToken ct)
    {
        await _process.WaitForExitAsync(ct);
        _process.WaitForExit();
        return _process.ExitCode;
    }

    public async ValueTask DisposeAsync()
    {
        if (!_process.HasExited)
        {
            try { _process.Kill(entireProcessTree: true); } catch (InvalidOperationException) { }
            try { await _process.WaitForExitAsync().WaitAsync(TimeSpan.FromSeconds(10)); } catch (TimeoutException) { }
        }
        _process.Dispose();
    }
}
