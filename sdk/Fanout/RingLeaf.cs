namespace Hpc.CommonData.Fanout;

public static partial class RingAllGather
{
    /// <summary>
    /// A leaf's part in the exchange: it fetches and forwards nothing, and takes every member's own share straight from
    /// that member. What it adds to the run is finding a member that owes it blocks and has gone silent.
    /// </summary>
    private sealed class RingLeaf(RingRun run)
    {
        /// <summary>A leaf counts what each member has sent it, so a member that owes it blocks and has gone silent is found.</summary>
        public readonly int[] FromMember = new int[run.Route.Members.Count];
        private readonly IRingRepair? _silentMember = run.Peers as IRingRepair;

        /// <summary>Every member's share but none of its own (a leaf has no share).</summary>
        public static int Expected(FanoutPlan plan) => plan.Shares.Sum(s => s.Count);

        /// <summary>Where a stall report says the blocks were to come from.</summary>
        public string Senders => $"ranks {string.Join(",", run.Route.Members)}";

        public Task ReceiveAll(RingReceiver receiver) =>
            Task.WhenAll(run.Route.Members.Select((member, k) => receiver.ReceiveFrom((b, t) => run.Peers!.ReceiveFromAsync(member, b, t), run.Plan.Shares[k].Count, member, k)));

        /// <summary>A leaf looks for a silent member a few times per peer silence; the stall is still no progress for the limit.</summary>
        public TimeSpan Tick(TimeSpan limit) => _silentMember is null ? limit : TimeSpan.FromTicks(Math.Min(limit.Ticks, run.Silence.Ticks / 4));

        public void ThrowIfMemberSilent()
        {
            if (_silentMember is null) return;
            for (var k = 0; k < FromMember.Length; k++)
                if (Volatile.Read(ref FromMember[k]) < run.Plan.Shares[k].Count && _silentMember.SilenceFrom(run.Route.Members[k]) >= run.Silence)
                {
                    // The member hangs or is gone: its share will not come over this ring. The leaf's node fetches
                    // what it lacks, as a node whose exchange failed; the others do not wait for it.
                    run.Failed.Cancel();
                    throw new TimeoutException($"rank {run.Route.Members[k]} sent this leaf (rank {run.Rank}) nothing for {run.Silence.TotalSeconds:0.#} s " +
                                               $"with {run.Plan.Shares[k].Count - Volatile.Read(ref FromMember[k])} of its blocks still to come");
                }
        }
    }
}
