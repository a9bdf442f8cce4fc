namespace Hpc.CommonData.Fanout;

/// <summary>
/// How the fan-out cuts a rank's share into blocks, the unit that is pipelined (fetched, sent, forwarded and written
/// while the next one is on its way): the same rule for the exchange's plan, <c>--fanout auto</c>'s estimate and the
/// simulator that replays it.
/// </summary>
public static class BlockSizing
{
    /// <summary>Blocks are at most 1 MB (per-message costs are long gone by then) ...</summary>
    public const int LargestBlockBytes = 1 << 20;

    /// <summary>... and at least 128 KB, whatever the dataset and rank count.</summary>
    public const int SmallestBlockBytes = 128 << 10;

    /// <summary>Each share is cut into about this many blocks, so the pipeline fills and drains in a fraction of the whole.</summary>
    public const int BlocksPerShare = 8;

    /// <summary>
    /// A share's first blocks are smaller: an eighth of the others, a quarter, a half (each at least one segment). A
    /// rank's own blocks come from the cache tier at the tier's rate over N, not its link's, and nothing moves on the
    /// ring until the first one is in: with blocks of 215 KB at N = 16 on the lab's 2 × 25 Mbit/s tier that was 0.55 s
    /// of idle links; an eighth of a block takes a few hundredths.
    /// </summary>
    public const int RampBlocks = 3;

    /// <summary>The largest block for shares of <paramref name="shareBytes"/> stored bytes.</summary>
    public static long For(double shareBytes) => (long)Math.Clamp(shareBytes / BlocksPerShare, SmallestBlockBytes, LargestBlockBytes);

    /// <summary>The cap on a share's <paramref name="index"/>-th block (from 0), its largest being <paramref name="largest"/>.</summary>
    public static long Cap(long largest, int index) => largest >> Math.Max(0, RampBlocks - index);
}
