//! Consumer-group requests as they travel to the coordinator of their
//! group (possibly on another shard) and its answers: owned, `Send` data.

use crate::partition::PartitionError;

/// A consumer-group request, forwarded to the coordinator's shard.
#[derive(Debug)]
pub enum GroupRequest {
    /// JoinGroup, with the client's address.
    Join {
        /// The request.
        request: corelog_wire::message::join_group::JoinGroupRequest,
        /// Where the member connects from.
        client_host: String,
        /// The principal whose group limit a new group counts against
        /// (`Access::limited_principal`).
        creator: Option<String>,
    },
    /// Heartbeat.
    Heartbeat(corelog_wire::message::heartbeat::HeartbeatRequest),
    /// LeaveGroup.
    Leave(corelog_wire::message::leave_group::LeaveGroupRequest),
    /// OffsetCommit.
    Commit {
        /// The request.
        request: corelog_wire::message::offset_commit::OffsetCommitRequest,
        /// Who commits (the login; `None` without one), for the audit
        /// record of a commit outside a generation.
        principal: Option<String>,
        /// The principal whose group limit a new group counts against
        /// (`Access::limited_principal`).
        creator: Option<String>,
    },
    /// OffsetFetch.
    Fetch(corelog_wire::message::offset_fetch::OffsetFetchRequest),
    /// DescribeGroups, one group.
    Describe(String),
    /// DeleteGroups, one group.
    Delete(String),
    /// ResetOffsets.
    Reset(corelog_wire::message::reset_offsets::ResetOffsetsRequest),
    /// WriteAudit.
    Audit(corelog_wire::message::write_audit::WriteAuditRequest),
    /// DeleteOffsets.
    DeleteOffsets(corelog_wire::message::delete_offsets::DeleteOffsetsRequest),
}

/// The answer to a [`GroupRequest`].
#[derive(Debug)]
pub enum GroupResponse {
    /// JoinGroup.
    Join(corelog_wire::message::join_group::JoinGroupResponse),
    /// Heartbeat.
    Heartbeat(corelog_wire::message::heartbeat::HeartbeatResponse),
    /// LeaveGroup.
    Leave(corelog_wire::message::leave_group::LeaveGroupResponse),
    /// OffsetCommit.
    Commit(corelog_wire::message::offset_commit::OffsetCommitResponse),
    /// OffsetFetch.
    Fetch(corelog_wire::message::offset_fetch::OffsetFetchResponse),
    /// DescribeGroups, one group, with the offsets of deleted topics
    /// (which version 0 leaves out).
    Describe(corelog_wire::message::describe_groups::GroupDescriptionV1),
    /// DeleteGroups, one group: the error, if any.
    Delete(Option<PartitionError>),
    /// ResetOffsets.
    Reset(corelog_wire::message::reset_offsets::ResetOffsetsResponse),
    /// WriteAudit.
    Audit(corelog_wire::message::write_audit::WriteAuditResponse),
    /// DeleteOffsets.
    DeleteOffsets(corelog_wire::message::delete_offsets::DeleteOffsetsResponse),
    /// The coordinator is not available (not loaded, or its shard stopped).
    Unavailable(PartitionError),
}
