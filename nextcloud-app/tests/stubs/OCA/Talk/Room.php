<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud Talk (spreed) 21, only what the app uses.
 */

namespace OCA\Talk;

/** The real constructor takes ~35 arguments; tests only need a type and a token. */
class Room {
	public const TYPE_ONE_TO_ONE = 1;
	public const TYPE_GROUP = 2;
	public const TYPE_PUBLIC = 3;
	public const TYPE_NOTE_TO_SELF = 6;

	public const READ_WRITE = 0;
	public const READ_ONLY = 1;

	public function __construct(
		private int $type,
		private string $token,
		private string $name = '',
		private int $readOnly = self::READ_WRITE,
		private string $remoteServer = '',
	) {
	}

	public function getName(): string {
		return $this->name;
	}

	/** The real one names a one-to-one conversation after the other user; tests give names. */
	public function getDisplayName(string $userId, bool $forceName = false): string {
		return $this->name;
	}

	public function getReadOnly(): int {
		return $this->readOnly;
	}

	public function isFederatedConversation(): bool {
		return $this->remoteServer !== '';
	}

	public function getType(): int {
		return $this->type;
	}

	public function getToken(): string {
		return $this->token;
	}
}
