using System.Diagnostics;

namespace Hpc.NodeAgent;

/// <summary>
/// Warnings another local user can cause at will (refused requests, bad frames, connections over a limit, abandoned
/// ingests). Each kind is logged at most once per interval; the line that is logged carries how many of its kind were
/// not since the last one, so a user hammering the socket costs the log one line per kind per interval, and the operator
/// still learns how much happened.
/// </summary>
public sealed class LogThrottle(TimeSpan interval)
{
    public enum Kind
    {
        ConnectionRefused,
        IdleClosed,
        BadFrame,
        RequestRefused,
        IngestRefused,
        IngestBrokenOff,
        SegmentsRejected,
        PeerRefused,
        PeerBadRequest,
        PeerBusy,
        Count,
    }

    private readonly long _interval = (long)(interval.TotalSeconds * Stopwatch.Frequency);
    private readonly long[] _next = new long[(int)Kind.Count];
    private readonly int[] _suppressed = new int[(int)Kind.Count];

    public TimeSpan Interval { get; } = interval;

    /// <summary>
    /// Whether a warning of <paramref name="kind"/> may be logged now; when it may, <paramref name="suppressed"/> is how
    /// many were held back since the last one logged, and the count starts again.
    /// </summary>
    public bool Allow(Kind kind, out int suppressed)
    {
        var now = Stopwatch.GetTimestamp();
        lock (_next)
        {
            var k = (int)kind;
            if (now < _next[k])
            {
                _suppressed[k]++;
                suppressed = 0;
                return false;
            }
            _next[k] = now + _interval;
            suppressed = _suppressed[k];
            _suppressed[k] = 0;
            return true;
        }
    }
}
