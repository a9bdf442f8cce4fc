using Hpc.CommonData.Fanout;

namespace Hpc.Bench.Simulation;

public sealed partial class Simulator
{
    private sealed partial class FanoutRun
    {
        private RingGrid? _grid;
        private double _gridBlock;
        private SubRing[] _columns = [], _groups = [];
        private int _ringsLeft;

        /// <summary>
        /// One ring of the grid (sdk/Fanout GridAllGather): its members in ring order, what each puts in, and its flows.
        /// A column's members fetch their share from the tier; a group's members put in their column's part, which is
        /// theirs once their column has finished (their "fetch" is that column's finish, plus the tier's repair of a
        /// dead member's part where they closed the ring around one).
        /// </summary>
        private sealed class SubRing(int[] ranks, double[] share, bool fromTier)
        {
            public int[] Ranks = ranks;
            public double[] Share = share;
            public readonly bool FromTier = fromTier;
            public Flow?[] Fetch = new Flow?[ranks.Length];
            public Flow?[] Edge = new Flow?[ranks.Length];
            public double[] FetchEnd = new double[ranks.Length];
            public double[] EdgeEnd = new double[ranks.Length];
            public int Pending;
            public bool Closed;

            public int Count => Ranks.Length;
            public double Total => Share.Sum();
            /// <summary>What edge k carries: every share but the one of the member it leads to (a block stops before its owner).</summary>
            public double Load(int k) => Total - Share[(k + 1) % Count];
        }

        /// <summary>
        /// The exchange as a grid of rings (<see cref="RingGrid"/>, the same layout node prep computes) over the ring's
        /// members: P columns of K members all-gather a part of S/P each, every member fetching S/(P·K) from the tier; K
        /// groups all-gather the P parts, every member putting in its column's part. All rings start together, a
        /// column's edges once its members' first blocks are in; a group's edges as long again later, since a member's
        /// first own block there is its column's first. Leaf j is served by group j mod K (<see cref="GridRoute"/>): its
        /// members' parts to it are one flow (<see cref="ToLeaf"/>) from when the group's edges start.
        /// </summary>
        private void ExchangeOverGrid(RingGrid grid)
        {
            _grid = grid;
            var (k, p) = (grid.Groups, grid.Positions);
            _gridBlock = BlockSizing.For(_s / p / k);
            _columns = Enumerable.Range(0, p).Select(c => new SubRing([.. grid.ColumnMembers(c).Select(m => _members[m])], Enumerable.Repeat(_s / p / k, k).ToArray(), fromTier: true)).ToArray();
            _groups = Enumerable.Range(0, k).Select(g =>
            {
                var members = grid.GroupMembers(g).Select(m => _members[m]).ToArray();
                return new SubRing(members, members.Select((_, q) => q < p ? _s / p : 0).ToArray(), fromTier: false);
            }).ToArray();
            _ringsLeft = _columns.Length + _groups.Length + _leaves.Length;
            _toLeaf = new Flow?[_leaves.Length];
            _leafEnd = new double[_leaves.Length];
            var firstBlock = FirstSend(Node(0), _gridBlock, _n);
            foreach (var column in _columns) StartRing(column, firstBlock);
            foreach (var group in _groups) StartRing(group, 2 * firstBlock);
            sim._net.After(2 * firstBlock, () =>
            {
                for (var i = 0; i < _leaves.Length; i++)
                {
                    var index = i;
                    var holders = _groups[i % k].Ranks.Take(p).Select(Node).ToArray();
                    _toLeaf[i] = sim.ToLeaf(holders, Node(_leaves[i]), _s, _ => { _leafEnd[index] = sim._net.Now; LeafDone(); });
                }
            });
            if (job.FailAfter is { } after) sim._net.After(after, Fail);
        }

        private void LeafDone()
        {
            if (--_ringsLeft > 0) return;
            _exchangeEnd = sim._net.Now;
            FinishGrid();
        }

        private void StartRing(SubRing ring, double edgesAfter)
        {
            ring.Pending = (ring.FromTier ? ring.Count : 0) + ring.Count;
            for (var i = 0; i < ring.Count; i++)
            {
                var k = i;
                if (ring.FromTier) ring.Fetch[k] = sim.FromTier(Node(ring.Ranks[k]), ring.Share[k], Delivery.Fanout, f => { _tierBytes += f.Size; ring.FetchEnd[k] = sim._net.Now; RingFlowDone(ring); });
            }
            sim._net.After(edgesAfter, () =>
            {
                if (ring.Closed) return;
                for (var i = 0; i < ring.Count; i++)
                {
                    var k = i;
                    ring.Edge[k] = sim.Between(Node(ring.Ranks[k]), Node(ring.Ranks[(k + 1) % ring.Count]), Math.Max(1, ring.Load(k)), _ => { ring.EdgeEnd[k] = sim._net.Now; RingFlowDone(ring); });
                }
            });
        }

        private void RingFlowDone(SubRing ring)
        {
            if (--ring.Pending > 0 || ring.Closed) return;
            if (--_ringsLeft > 0) return;
            _exchangeEnd = sim._net.Now;
            FinishGrid();
        }

        /// <summary>
        /// When each node holds everything: its column's ring finishes as a ring does (<see cref="RingFinish"/>); its
        /// group's ring likewise, with each member's own blocks in hand when its column finished (and, for one that
        /// closed its ring around a dead member, when the tier's repair of that member's part arrived).
        /// </summary>
        private void FinishGrid()
        {
            double Hop(SubRing ring, int k) => _gridBlock / Math.Min(sim.LinkRate(Node(ring.Ranks[k])), sim.LinkRate(Node(ring.Ranks[(k + 1) % ring.Count]))) + sim._spec.HopLatency;
            var columnDone = Enumerable.Repeat(_exchangeStart, _n).ToArray();
            foreach (var column in _columns)
            {
                var finish = RingFinish(column.EdgeEnd, column.FetchEnd, k => Hop(column, k));
                for (var k = 0; k < column.Count; k++) columnDone[column.Ranks[k]] = finish[k];
            }
            foreach (var group in _groups)
            {
                var ready = group.Ranks.Select((r, k) => Math.Max(columnDone[r], group.FetchEnd[k])).ToArray();
                var finish = RingFinish(group.EdgeEnd, ready, k => Hop(group, k));
                for (var k = 0; k < group.Count; k++) _done[group.Ranks[k]] = Ingested(Math.Max(finish[k], columnDone[group.Ranks[k]]));
            }
            // A leaf has everything when its group's parts have crossed its link, and not before the last of them was in
            // its holder's hands.
            for (var i = 0; i < _leaves.Length; i++)
            {
                var holders = _groups[i % _groups.Length].Ranks.Take(_grid!.Positions);
                _done[_leaves[i]] = Ingested(Math.Max(_leafEnd[i], holders.Max(r => columnDone[r]) + _gridBlock / sim.LinkRate(Node(_leaves[i])) + sim._spec.HopLatency));
            }
        }

        /// <summary>
        /// A rank dies mid-exchange. With a peer timeout both of its rings close around it (<see cref="CloseSubRing"/>)
        /// and every other ring runs on; its column's members elsewhere then put their part into their groups late,
        /// which their groups' finish takes in. Without one, everything stops and every survivor fetches what it lacks
        /// after the stall timeout.
        /// </summary>
        private void FailOverGrid()
        {
            // A ring that had already finished has nothing to close.
            var rings = _columns.Concat(_groups).Where(r => r.Ranks.Contains(_dead) && r.Pending > 0).ToArray();
            if (job.PeerTimeout is { } peerTimeout && rings.All(r => r.Count > 2))
            {
                _stopped = false;
                foreach (var ring in rings) CloseSubRing(ring, peerTimeout);
                StopLeafFlows(peerTimeout);
                return;
            }
            var received = new double[_n];
            foreach (var ring in _columns.Concat(_groups))
                for (var k = 0; k < ring.Count; k++)
                {
                    ring.Closed = true;
                    if (ring.Fetch[k] is { } f) { sim._net.Cancel(f); received[ring.Ranks[k]] += f.Moved; _tierBytes += f.Moved; }
                    if (ring.Edge[k] is { } e) { sim._net.Cancel(e); received[ring.Ranks[(k + 1) % ring.Count]] += e.Moved; }
                }
            for (var i = 0; i < _leaves.Length; i++)
                if (_toLeaf[i] is { } l) { sim._net.Cancel(l); received[_leaves[i]] += l.Moved; }
            FallBack(received);
        }

        /// <summary>
        /// A leaf whose group lost a member gives up on it after the detection (a process that dies closes its
        /// connection; one that hangs is silent for the peer timeout): its exchange fails and it fetches what it lacks
        /// from the tier. Its flow stops at the death, so what the group's other members sent it meanwhile is not
        /// counted (errs slow). A leaf that dies is simply gone.
        /// </summary>
        private void StopLeafFlows(double detection)
        {
            for (var i = 0; i < _leaves.Length; i++)
            {
                if (_toLeaf[i] is not { } flow || _leafEnd[i] > 0) continue;
                var leaf = _leaves[i];
                if (leaf != _dead && !_groups[i % _groups.Length].Ranks.Contains(_dead)) continue;
                sim._net.Cancel(flow);
                _toLeaf[i] = null;
                var index = i;
                if (leaf == _dead) { LeafDone(); continue; }
                _fellBack++;
                var rest = Math.Max(0, _s - flow.Moved);
                sim._net.After(detection, () => sim.FromTier(Node(leaf), rest, Delivery.Direct, f => { _tierBytes += f.Size; _leafEnd[index] = sim._net.Now; LeafDone(); }));
            }
        }

        /// <summary>
        /// One ring of the grid closes around the dead member, as <see cref="CloseRing"/> closes the one ring: after the
        /// peer timeout and a connection, its left neighbour sends the member after it what that one lacks and fetches
        /// from the tier what is left of the dead member's share; the others carry what their edges had left, and the
        /// ring finishes with one member fewer.
        /// </summary>
        private void CloseSubRing(SubRing ring, double peerTimeout)
        {
            var m = ring.Count;
            var dead = Array.IndexOf(ring.Ranks, _dead);
            var fetchMoved = new double[m];
            var edgeMoved = new double[m];
            for (var k = 0; k < m; k++)
            {
                if (ring.Fetch[k] is { } f)
                {
                    if (ring.FetchEnd[k] == 0) { sim._net.Cancel(f); _tierBytes += f.Moved; fetchMoved[k] = f.Moved; }
                    else fetchMoved[k] = ring.Share[k];
                }
                if (ring.Edge[k] is { } e)
                {
                    if (ring.EdgeEnd[k] == 0) { sim._net.Cancel(e); edgeMoved[k] = e.Moved; }
                    else edgeMoved[k] = ring.Load(k);
                }
            }
            ring.Closed = true;
            var deadLoad = ring.Load(dead);
            var deadShareLeft = ring.Share[dead] * (1 - (deadLoad > 0 ? edgeMoved[dead] / deadLoad : 1));
            sim._net.After(peerTimeout + 2 * sim._spec.HopLatency, () =>
            {
                var survivors = Enumerable.Range(0, m).Where(k => k != dead).ToArray();
                var n = survivors.Length;
                var closed = new SubRing([.. survivors.Select(k => ring.Ranks[k])], [.. survivors.Select(k => ring.Share[k])], ring.FromTier);
                var index = Array.IndexOf(_columns, ring);
                if (index >= 0) _columns[index] = closed;
                else _groups[Array.IndexOf(_groups, ring)] = closed;
                closed.Pending = 0;
                for (var i = 0; i < n; i++)
                {
                    var position = i;
                    var k = survivors[i];
                    var bypass = (k + 1) % m == dead;
                    // A column member fetches the rest of its share; a group member's own blocks come from its column.
                    var fetch = (ring.FromTier ? Math.Max(0, ring.Share[k] - fetchMoved[k]) : 0) + (bypass ? deadShareLeft : 0);
                    if (fetch > 0)
                    {
                        closed.Pending++;
                        closed.Fetch[position] = sim.FromTier(Node(closed.Ranks[position]), fetch, Delivery.Fanout, f => { _tierBytes += f.Size; closed.FetchEnd[position] = sim._net.Now; RingFlowDone(closed); });
                    }
                    else closed.FetchEnd[position] = ring.FromTier ? ring.FetchEnd[k] : 0;
                    var edge = Math.Max(1, bypass ? deadLoad - edgeMoved[dead] : ring.Load(k) - edgeMoved[k]);
                    closed.Pending++;
                    closed.Edge[position] = sim.Between(Node(closed.Ranks[position]), Node(closed.Ranks[(position + 1) % n]), edge, _ => { closed.EdgeEnd[position] = sim._net.Now; RingFlowDone(closed); });
                }
            });
        }
    }
}
