using System.Buffers;

namespace Hpc.CommonData.Fanout;

public static partial class RingAllGather
{
    /// <summary>An own block for a leaf: the message while it is kept, else null and the block is fetched again.</summary>
    private readonly record struct LeafItem(Message? Message, Block Block);

    /// <summary>A pooled message buffer shared by the node writer and the sender; returned when both are done.</summary>
    internal sealed class Message
    {
        private int _holders;
        public byte[] Array = [];
        public Memory<byte> Buffer => Array;
        public int Length;
        public bool Own;
        /// <summary>The block's share and first segment (its identity in the plan).</summary>
        public int Share, First;
        /// <summary>Sent to a new right neighbour after a bypass, whatever its share.</summary>
        public bool Inject;
        /// <summary>Leaves this message still has to reach.</summary>
        public int LeafHolders;

        public static Message Rent(int size, int holders) => new() { Array = ArrayPool<byte>.Shared.Rent(size), _holders = holders };

        public void Release()
        {
            if (Interlocked.Decrement(ref _holders) == 0) ArrayPool<byte>.Shared.Return(Array);
        }
    }
}
