using Hpc.CommonData.Hosting;

namespace Hpc.Stager;

/// <summary>The stager's meter (<see cref="HpcMetrics.StagerMeter"/>), one per process.</summary>
public static class StagerMetrics
{
    public static ComponentMetrics Instance { get; } = new(HpcMetrics.StagerMeter);
}
