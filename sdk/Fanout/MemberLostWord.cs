namespace Hpc.CommonData.Fanout;

/// <summary>
/// The word that a member of an exchange was routed around, shared by the rings one rank takes part in (the grid's
/// column and group rings): what one ring learns, the other passes on against its flow, so that every survivor of a
/// grid hears it over two hops of rings, not only the members of the lost one's own rings.
/// </summary>
public sealed class MemberLostWord
{
    private readonly List<Action> _listeners = [];
    private bool _heard;

    public bool Heard
    {
        get { lock (_listeners) return _heard; }
    }

    /// <summary>Calls <paramref name="listener"/> once the word is heard (at once when it already was).</summary>
    public void Listen(Action listener)
    {
        lock (_listeners)
        {
            if (!_heard)
            {
                _listeners.Add(listener);
                return;
            }
        }
        listener();
    }

    /// <summary>Hears the word; the listeners are told the first time only.</summary>
    public void Hear()
    {
        Action[] listeners;
        lock (_listeners)
        {
            if (_heard) return;
            _heard = true;
            listeners = [.. _listeners];
            _listeners.Clear();
        }
        foreach (var listener in listeners) listener();
    }
}
