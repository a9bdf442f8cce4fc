using Hpc.CommonData;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Tests;

/// <summary>
/// Every verb ends with the code of its failure's kind, the values of sysexits.h, so a prolog can tell the job's fault
/// (not found, denied) from the tier's (unavailable, try later) and the node's (integrity, no space).
/// </summary>
public class ExitCodeTests
{
    [Theory]
    [InlineData(ErrorCode.NotFound, 66)]
    [InlineData(ErrorCode.Integrity, 65)]
    [InlineData(ErrorCode.Unavailable, 69)]
    [InlineData(ErrorCode.NoSpace, 73)]
    [InlineData(ErrorCode.Timeout, 75)]
    [InlineData(ErrorCode.Limit, 75)]
    [InlineData(ErrorCode.Protocol, 76)]
    [InlineData(ErrorCode.AccessDenied, 77)]
    [InlineData(ErrorCode.BadRequest, 2)]
    [InlineData(ErrorCode.Internal, 1)]
    public void Each_kind_of_failure_has_its_own_code(ErrorCode kind, int code)
    {
        Assert.Equal(code, ExitCodes.For(kind));
        Assert.Equal(code, ExitCodes.Of(new CommonDataException(kind, "x")));
    }

    [Fact]
    public void What_the_runtime_throws_is_classified_as_the_error_model_classifies_it()
    {
        Assert.Equal(ExitCodes.NotFound, ExitCodes.Of(new FileNotFoundException("gone")));
        Assert.Equal(ExitCodes.Unavailable, ExitCodes.Of(new IOException("connection refused")));
        Assert.Equal(ExitCodes.TryLater, ExitCodes.Of(new TimeoutException()));
        Assert.Equal(ExitCodes.Denied, ExitCodes.Of(new UnauthorizedAccessException()));
        Assert.Equal(ExitCodes.Usage, ExitCodes.Of(new FormatException("bad size")));
        Assert.Equal(ExitCodes.Usage, ExitCodes.Of(new ArgumentException("bad name")));
        Assert.Equal(ExitCodes.Failed, ExitCodes.Of(new InvalidOperationException("fault")));
    }
}
