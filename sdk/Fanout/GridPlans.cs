using Hpc.CommonData.Format;

namespace Hpc.CommonData.Fanout;

/// <summary>What each ring of a <see cref="RingGrid"/> carries, in <see cref="FanoutPlan"/>s.</summary>
public static class GridPlans
{
    /// <summary>
    /// Every column's plan (its part of the data over its K members) and the plan of <paramref name="group"/>'s ring
    /// (share q: column q's blocks, as the column cut them; a member beyond the positions has an empty share). Every
    /// rank computes the same from the manifest alone.
    /// </summary>
    public static (FanoutPlan Group, IReadOnlyList<FanoutPlan> Columns) Plans(this RingGrid grid, Manifest manifest, int group, IReadOnlyList<bool>? needed = null)
    {
        var parts = new FanoutPlan(manifest, grid.Positions, needed: needed);
        var columns = parts.Shares.Select(part =>
        {
            var inPart = new bool[manifest.Segments.Count];
            foreach (var block in part)
                for (var i = block.First; i < block.First + block.Count; i++) inPart[i] = true;
            return new FanoutPlan(manifest, grid.Groups, needed: inPart);
        }).ToArray();
        var shares = columns.Select(c => (IReadOnlyList<Block>)c.Shares.SelectMany(s => s).ToArray()).ToList();
        if (group < grid.LargerGroups) shares.Add([]);
        return (new FanoutPlan(manifest, shares), columns);
    }

}
