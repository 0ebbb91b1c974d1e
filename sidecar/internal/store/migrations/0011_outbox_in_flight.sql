-- A Talk message whose send may have reached Talk without the sidecar learning so (the
-- process died during the send, or the connection broke after the request left). Before
-- sending it again the outbox asks the app whether it is already in the conversation.
ALTER TABLE talk_outbox ADD COLUMN in_flight INTEGER NOT NULL DEFAULT 0;
