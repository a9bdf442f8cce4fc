using System.Threading.Channels;

namespace Hpc.CommonData.Fanout;

public static partial class RingAllGather
{
    /// <summary>
    /// One member's view of a ring that routes around dead members: what it has (by block), what it sent to its right
    /// neighbour, which shares it does not forward (its right neighbour's, and those of the dead members before it).
    /// </summary>
    private sealed class Repair
    {
        private readonly FanoutPlan _plan;
        private readonly RingRoute _route;
        private readonly int _position;
        private readonly bool[] _have;
        private readonly Dictionary<int, Block> _blocks = [];
        private readonly HashSet<int> _sent = [];
        private readonly bool[] _stop;
        private readonly HashSet<int> _dead = [];
        private int _rightPosition, _remaining, _leftRank;
        private readonly Lock _lock = new();

        public Repair(FanoutPlan plan, RingRoute route, int position, int expected, TimeSpan silence)
        {
            (_plan, _route, _position, Silence) = (plan, route, position, silence);
            _have = new bool[plan.Manifest.Segments.Count];
            foreach (var block in plan.Shares.SelectMany(b => b)) _blocks[block.First] = block;
            // This rank's own share is never sent to it: to a member that connects past its neighbour, it is had.
            foreach (var block in plan.Shares[position]) _have[block.First] = true;
            _stop = new bool[plan.Ranks];
            _rightPosition = (position + 1) % plan.Ranks;
            _stop[_rightPosition] = true;
            _leftRank = route.LeftOf(route.Members[position]);
            _remaining = expected;
            if (expected == 0) AllIn.TrySetResult();
        }

        public const byte ReportHasAll = 1, ReportRightHasAll = 2, ReportAlive = 3, ReportMemberLost = 4;
        /// <summary>One bypass at a time.</summary>
        public SemaphoreSlim Bypassing { get; } = new(1);
        /// <summary>What the right neighbour reported: it has everything; and so does the member after it.</summary>
        public volatile bool RightHasAll, NextHasAll;
        /// <summary>A member of this ring was routed around, by this rank or by another that said so against the flow:
        /// that member's process is gone or cut off and will never reach a closing barrier.</summary>
        public volatile bool MemberLost;

        /// <summary>Marks a member lost; true when this rank had not known it, and so passes the word on to its left.</summary>
        public bool LearnMemberLost()
        {
            lock (_lock)
            {
                if (MemberLost) return false;
                MemberLost = true;
                return true;
            }
        }

        public TimeSpan Silence { get; }
        /// <summary>Completes when this rank has every block but its own share.</summary>
        public TaskCompletionSource AllIn { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);
        /// <summary>Members that connected past the left neighbour, waiting for this rank's have-map.</summary>
        public Channel<Swap> Swaps { get; } = Channel.CreateUnbounded<Swap>();
        public volatile bool LeftFailed;
        public int LeftRank { get => Volatile.Read(ref _leftRank); set => Volatile.Write(ref _leftRank, value); }
        public int RightRank { get { lock (_lock) return _route.Members[_rightPosition]; } }
        public int Remaining => Volatile.Read(ref _remaining);

        /// <summary>Marks a block had; false when it already was (or is this rank's own). Throws for a block not in the
        /// plan. A message's share is the member that put it into the ring: after a bypass, not always the block's.</summary>
        public bool Take(int first)
        {
            lock (_lock)
            {
                if (!_blocks.ContainsKey(first)) throw new InvalidDataException($"block message at segment {first} is not a block of the plan");
                if (_have[first]) return false;
                _have[first] = true;
                if (--_remaining == 0) AllIn.TrySetResult();
                return true;
            }
        }

        public bool Lacks(int first)
        {
            lock (_lock) return !_have[first];
        }

        public bool Forwards(int share)
        {
            lock (_lock) return !_stop[share];
        }

        public void Sent(int first)
        {
            lock (_lock) _sent.Add(first);
        }

        /// <summary>One bit per segment, set at the first segment of every block this rank has or needs not; then a byte
        /// of the reports this rank has sent its left neighbour so far (a new one learns them here).</summary>
        public byte[] HaveMap()
        {
            var map = new byte[(_have.Length + 7) / 8 + 1];
            lock (_lock)
            {
                for (var i = 0; i < _have.Length; i++)
                    if (_have[i]) map[i >> 3] |= (byte)(1 << (i & 7));
                map[^1] = (byte)((AllIn.Task.IsCompleted ? ReportHasAll : 0) | (RightHasAll ? ReportRightHasAll : 0));
            }
            return map;
        }

        /// <summary>
        /// Connects to the members after <paramref name="gone"/> in ring order, each that does not answer counted dead
        /// too. Returns the member that answered, its have-map (null: it refused), and the positions passed over.
        /// </summary>
        public async Task<(int Next, byte[]? Have, List<int> Skipped)> ConnectPastAsync(IRingRepair links, int gone, CancellationToken ct)
        {
            List<int> skipped;
            lock (_lock) skipped = [_rightPosition];
            if (_route.Members[skipped[0]] != gone) throw new InvalidOperationException($"rank {gone} is not this rank's right neighbour");
            for (var next = (skipped[0] + 1) % _plan.Ranks; next != _position; next = (next + 1) % _plan.Ranks)
            {
                byte[]? have;
                try { have = await links.BypassAsync(_route.Members[next], [.. skipped.Select(k => _route.Members[k])], TimeSpan.FromSeconds(5), ct); }
                catch (Exception e) when (e is System.Net.Sockets.SocketException or IOException or TimeoutException)
                {
                    skipped.Add(next);
                    continue;
                }
                if (have is null) return (next, null, skipped);
                if (have.Length != (_have.Length + 7) / 8 + 1) throw new InvalidDataException($"rank {_route.Members[next]} answered a have-map of {have.Length} bytes");
                lock (_lock)
                {
                    RightHasAll = (have[^1] & ReportHasAll) != 0;
                    NextHasAll = (have[^1] & ReportRightHasAll) != 0;
                    _rightPosition = next;
                    foreach (var k in skipped) _dead.Add(k);
                    foreach (var k in skipped) _stop[k] = true;
                    _stop[next] = true;
                }
                return (next, have, skipped);
            }
            throw new IOException($"rank {gone} and every member after it are gone: no ring is left to route through");
        }

        /// <summary>
        /// What the new right neighbour lacks that no one else will send it: blocks this rank sent into the dead member,
        /// and the dead members' own blocks that never came round. Everything else reaches it in the ring's flow.
        /// </summary>
        public List<(Block Block, bool Dead)> Resend(byte[] have, int next)
        {
            var again = new List<(Block, bool)>();
            lock (_lock)
                for (var k = 0; k < _plan.Ranks; k++)
                {
                    if (k == next) continue;
                    foreach (var block in _plan.Shares[k])
                        if ((have[block.First >> 3] & (1 << (block.First & 7))) == 0 && (_sent.Contains(block.First) || _dead.Contains(k)))
                            again.Add((block, _dead.Contains(k)));
                }
            return again;
        }

        /// <summary>Answers a member that connects past this rank's left neighbour: refused while that neighbour is heard.</summary>
        public BypassHandler AnswerBypassAsync(IRingRepair links) => async (rank, skipped, ct) =>
        {
            var left = LeftRank;
            if (!skipped.Contains(left)) return null;
            if (!LeftFailed && !AllIn.Task.IsCompleted && links.SilenceFrom(left) < Silence / 2) return null;
            var swap = new Swap(rank);
            Swaps.Writer.TryWrite(swap);
            links.Drop(left);
            // A rank that already has everything answers at once: its receiving is over.
            await Task.WhenAny(swap.Have.Task, AllIn.Task).WaitAsync(ct);
            if (!swap.Have.Task.IsCompleted)
            {
                LeftRank = rank;
                return HaveMap();
            }
            return await swap.Have.Task;
        };

        public sealed record Swap(int Rank)
        {
            public TaskCompletionSource<byte[]> Have { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);
        }
    }
}
