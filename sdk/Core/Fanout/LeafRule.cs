namespace Hpc.CommonData.Fanout;

/// <summary>One probed link: bytes per second, and over how many seconds that was measured.</summary>
public readonly record struct ProbeResult(double BytesPerSecond, double Seconds)
{
    public const int Length = 16;

    public byte[] ToBytes()
    {
        var bytes = new byte[Length];
        BitConverter.TryWriteBytes(bytes.AsSpan(0, 8), BytesPerSecond);
        BitConverter.TryWriteBytes(bytes.AsSpan(8, 8), Seconds);
        return bytes;
    }

    public static ProbeResult FromBytes(ReadOnlySpan<byte> bytes) =>
        new(BitConverter.ToDouble(bytes[..8]), BitConverter.ToDouble(bytes.Slice(8, 8)));
}

/// <summary>What the ranks do after a probe round (<see cref="LeafRule.After"/>).</summary>
public enum ProbeStep { Grow, Confirm, Stop }

/// <summary>
/// The fan-out's link probe schedule and the rule that routes slow nodes out of the ring, as pure functions of what the
/// ranks measured: node prep's ranks run them, and the bench's simulator models a cluster with the very same rule.
/// </summary>
/// <remarks>
/// The probe runs in rounds that every rank runs in lockstep: <see cref="Chunks"/> messages to the right neighbour,
/// timed at the left one from the first message's arrival. The first round sends <see cref="FirstRoundBytes"/> per
/// link; while the median link passed its round too quickly to judge (<see cref="LongEnoughToJudge"/>), the next sends
/// <see cref="Growth"/> times as much, up to <see cref="LastRoundBytes"/>, all within <see cref="Limit"/>.
/// </remarks>
public static class LeafRule
{
    /// <summary>A node counts as slow below this share of the median node's rate.</summary>
    public const double SlowShareOfMedian = 0.5;

    /// <summary>
    /// A node becomes a leaf only if the faster of its two probes took at least this long: a probe that short on every
    /// link is scheduling noise (MPI's progress thread polls each millisecond), not a measured rate. The rounds grow
    /// until the median link takes half of this, so a node at half the median's rate or slower is timed for at least
    /// this long whatever the fabric's speed (up to the largest round).
    /// </summary>
    public static readonly TimeSpan ShortestTelling = TimeSpan.FromMilliseconds(20);

    /// <summary>Fewer ranks than this form a plain ring: with two, each only receives from the other anyway.</summary>
    public const int SmallestWithLeaves = 3;

    /// <summary>
    /// The first round's bytes on each link. Every byte of the probe that crosses a slow node's link delays that node by
    /// its own link's pace (64 KB at 6.25 Mbit/s: 84 ms), so the first round is as small as still gives the median
    /// link 10 ms at 25 Mbit/s; faster fabrics grow into rounds they can judge.
    /// </summary>
    public const int FirstRoundBytes = 64 << 10;

    /// <summary>The most bytes one round sends on a link (the sixth round).</summary>
    public const int LastRoundBytes = 64 << 20;

    /// <summary>How much more each round sends than the one before.</summary>
    public const int Growth = 4;

    /// <summary>Messages per round: the rate is timed from the first one's arrival to the last's.</summary>
    public const int Chunks = 8;

    /// <summary>The longest a rank spends on its measurement; the rest of the last round is still drained before the exchange.</summary>
    public static readonly TimeSpan Limit = TimeSpan.FromSeconds(1);

    /// <summary>The bytes round <paramref name="round"/> (from 0) sends on each link.</summary>
    public static long RoundBytes(int round) => (long)FirstRoundBytes << (2 * round);

    /// <summary>
    /// Whether a round measured the links for long enough that a node at <see cref="SlowShareOfMedian"/> of the median's
    /// rate or slower has probes of at least <see cref="ShortestTelling"/>: the median link took that long times the
    /// share. A shorter round is repeated larger.
    /// </summary>
    public static bool LongEnoughToJudge(IReadOnlyList<ProbeResult> links) =>
        Median(links.Select(l => l.Seconds)) >= ShortestTelling.TotalSeconds * SlowShareOfMedian;

    /// <summary>
    /// What the ranks do after a probe round, decided alike on every rank from what they all-gathered:
    /// <list type="bullet">
    /// <item><see cref="ProbeStep.Grow"/>: the round was too short to judge (<see cref="LongEnoughToJudge"/>), and a round
    /// <see cref="Growth"/> times larger still fits (<paramref name="nextFits"/>: its bytes, and its time in
    /// <paramref name="limitSeconds"/> at the slowest link's pace of this round);</item>
    /// <item><see cref="ProbeStep.Confirm"/>: the round makes a node a leaf: one more round runs (<see cref="ConfirmingRound"/>),
    /// if it fits in the time, and a node stays a leaf only if that round finds it slow too (<see cref="Confirmed"/>);</item>
    /// <item><see cref="ProbeStep.Stop"/>: otherwise, after a confirming round, or when a link did not deliver its round in
    /// time.</item>
    /// </list>
    /// </summary>
    /// <remarks>
    /// Why confirm: one round on a node whose cores are busy (the job's workers, or other nodes' processes sharing the
    /// cores of an emulated cluster) can read a healthy link slow, when the node's process was not scheduled while its
    /// chunks came and went; a leaf then costs the ring that member's uplink for the whole exchange. A slow link is slow in
    /// every round; a descheduled process is rarely so twice. The cost is one more round where a node reads slow, at the
    /// slow link's pace, as short as still times that link for the floor.
    /// </remarks>
    public static ProbeStep After(IReadOnlyList<ProbeResult> links, bool allComplete, bool confirming, bool nextFits, double elapsedSeconds,
        double roundSeconds, double limitSeconds, TimeSpan? shortestTelling = null)
    {
        if (confirming || !allComplete) return ProbeStep.Stop;
        if (!LongEnoughToJudge(links) && nextFits && elapsedSeconds + Growth * roundSeconds <= limitSeconds) return ProbeStep.Grow;
        return Leaves(links, shortestTelling).Length > 0 && elapsedSeconds + roundSeconds <= limitSeconds ? ProbeStep.Confirm : ProbeStep.Stop;
    }

    /// <summary>
    /// The round that confirms the leaves <paramref name="judged"/> (round <paramref name="judgedRound"/>) made: the
    /// smallest in which each of them is still timed for half again <see cref="ShortestTelling"/> on its faster link, and
    /// no larger than the judged round. The round runs at the slow links' pace, so it is kept as short as still tells.
    /// </summary>
    public static int ConfirmingRound(IReadOnlyList<ProbeResult> judged, int judgedRound, TimeSpan? shortestTelling = null)
    {
        var n = judged.Count;
        var fastest = Leaves(judged, shortestTelling).Max(r => Math.Max(judged[r].BytesPerSecond, judged[(r + 1) % n].BytesPerSecond));
        var bytes = 1.5 * fastest * (shortestTelling ?? ShortestTelling).TotalSeconds * Chunks / (Chunks - 1);
        var round = 0;
        while (round < judgedRound && RoundBytes(round) < bytes) round++;
        return round;
    }

    /// <summary>
    /// The readings after a confirming round: the links of the nodes the judged round made leaves each at the better of
    /// their two readings, every other link as judged. A node stays a leaf only if both rounds found it slow, and the
    /// second round, shorter on the healthy links, cannot make a leaf of anyone else.
    /// </summary>
    public static ProbeResult[] Confirmed(IReadOnlyList<ProbeResult> judged, IReadOnlyList<ProbeResult> second, TimeSpan? shortestTelling = null)
    {
        var n = judged.Count;
        var confirmed = judged.ToArray();
        foreach (var r in Leaves(judged, shortestTelling))
            foreach (var link in new[] { r, (r + 1) % n })
                if (second[link].BytesPerSecond > judged[link].BytesPerSecond) confirmed[link] = second[link];
        return confirmed;
    }

    /// <summary>
    /// Each node's rate from every rank's probe of the link from its left neighbour (<paramref name="incoming"/>[r]:
    /// from r−1 into r): the faster of its two probed links (into r, and out of r into r+1), since a slow node slows
    /// both and a healthy neighbour of it only one.
    /// </summary>
    public static double[] NodeRates(IReadOnlyList<ProbeResult> incoming) =>
        [.. Enumerable.Range(0, incoming.Count).Select(r => Math.Max(incoming[r].BytesPerSecond, incoming[(r + 1) % incoming.Count].BytesPerSecond))];

    /// <summary>
    /// The ranks to route out of the ring, in rank order: a node whose rate is below <see cref="SlowShareOfMedian"/> of
    /// the median node's, measured for at least <paramref name="shortestTelling"/> (by default
    /// <see cref="ShortestTelling"/>). None with fewer than <see cref="SmallestWithLeaves"/> ranks, or when fewer than two
    /// members would be left.
    /// </summary>
    public static int[] Leaves(IReadOnlyList<ProbeResult> incoming, TimeSpan? shortestTelling = null)
    {
        var size = incoming.Count;
        if (size < SmallestWithLeaves) return [];
        var rates = NodeRates(incoming);
        var median = Median(rates);
        var floor = (shortestTelling ?? ShortestTelling).TotalSeconds;
        bool Slow(int r)
        {
            if (!(rates[r] < SlowShareOfMedian * median)) return false;
            // The faster of r's two links sets its rate, so that one must have taken long enough to tell a rate from
            // noise: a neighbour of a slow node has one slow link, and its other one, measured in a millisecond, may
            // well read below half a noisy median.
            var faster = incoming[r].BytesPerSecond >= incoming[(r + 1) % size].BytesPerSecond ? incoming[r] : incoming[(r + 1) % size];
            return faster.Seconds >= floor;
        }
        var leaves = Enumerable.Range(0, size).Where(Slow).ToArray();
        // Below the median by half can be at most half the nodes; two members are still kept whatever happens.
        return size - leaves.Length < 2 ? [] : leaves;
    }

    private static double Median(IEnumerable<double> values)
    {
        var ordered = values.Order().ToArray();
        var n = ordered.Length;
        return n % 2 == 1 ? ordered[n / 2] : (ordered[n / 2 - 1] + ordered[n / 2]) / 2;
    }
}
