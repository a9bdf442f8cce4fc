namespace Hpc.CacheHost.Server;

/// <summary>
/// Lets one line through per interval for an event a client can cause as often as it likes (a spent AUTH budget, a
/// refused connection), so an attacker cannot fill the log or spend the host's time writing it; the lines held back
/// are counted, and the next line that goes out says how many.
/// </summary>
internal sealed class LogGate(TimeProvider time, TimeSpan interval)
{
    public static readonly TimeSpan DefaultInterval = TimeSpan.FromMinutes(1);

    private readonly Lock _lock = new();
    private long _last;
    private bool _open = true;
    private long _heldBack;

    /// <summary>True when a line may be written now; <paramref name="heldBack"/> is then how many were not since the last.</summary>
    public bool TryPass(out long heldBack)
    {
        long now = time.GetTimestamp();
        lock (_lock)
        {
            if (!_open && time.GetElapsedTime(_last, now) < interval)
            {
                _heldBack++;
                heldBack = 0;
                return false;
            }
            (_open, _last, heldBack, _heldBack) = (false, now, _heldBack, 0);
            return true;
        }
    }
}
