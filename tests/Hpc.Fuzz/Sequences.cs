using System.Buffers;

namespace Hpc.Fuzzing;

/// <summary>Byte sequences in several pieces, as a socket or a pipe hands them over: a parser must not care where they are cut.</summary>
public static class Sequences
{
    public static ReadOnlySequence<byte> Of(params byte[][] chunks)
    {
        if (chunks.Length == 0) return ReadOnlySequence<byte>.Empty;
        var first = new Chunk(chunks[0]);
        var last = first;
        foreach (var chunk in chunks.Skip(1)) last = last.Append(chunk);
        return new ReadOnlySequence<byte>(first, 0, last, last.Memory.Length);
    }

    private sealed class Chunk : ReadOnlySequenceSegment<byte>
    {
        public Chunk(byte[] bytes) => Memory = bytes;

        public Chunk Append(byte[] bytes)
        {
            var next = new Chunk(bytes) { RunningIndex = RunningIndex + Memory.Length };
            Next = next;
            return next;
        }
    }
}
