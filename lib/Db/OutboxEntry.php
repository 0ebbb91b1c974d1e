<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Db;

/**
 * OutboxEntry is one Talk event waiting for the sidecar: the exact request body, the
 * conversation token and message id (for logs; the sidecar dedupes on them) and its
 * delivery history. Times are Unix seconds.
 */
final class OutboxEntry {
	public function __construct(
		public readonly int $id,
		public readonly string $body,
		public readonly string $conversationToken,
		public readonly string $messageId,
		public readonly int $createdAt,
		public readonly int $attempts,
		public readonly string $lastError,
		public readonly int $nextAttemptAt,
	) {
	}

	/** @param array<string, mixed> $row a database row; drivers may return numbers as strings */
	public static function fromRow(array $row): self {
		return new self(
			(int)$row['id'],
			(string)$row['body'],
			(string)($row['conversation_token'] ?? ''),
			(string)($row['message_id'] ?? ''),
			(int)$row['created_at'],
			(int)$row['attempts'],
			(string)($row['last_error'] ?? ''),
			(int)$row['next_attempt_at'],
		);
	}
}
