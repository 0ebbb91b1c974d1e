<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud Talk (spreed) 21, only what the app uses.
 */

namespace OCA\Talk\Service;

use OCA\Talk\Room;

/** Test double: user counts by room token. */
class ParticipantService {
	/** @param array<string, int> $userCounts by token */
	public function __construct(
		private array $userCounts = [],
	) {
	}

	public function getNumberOfUsers(Room $room): int {
		return $this->userCounts[$room->getToken()] ?? 0;
	}
}
