-- The outbox rows of notifying entries are now inserted by the group append itself, in the same
-- transaction and the same call as the entries (see `store/sqlite/group.rs`): the trigger ran a
-- sub-program for every inserted row, notifying or not, which cost more than the insert itself.
DROP TRIGGER notify_outbox_on_entry;
