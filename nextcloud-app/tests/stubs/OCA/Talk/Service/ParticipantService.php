<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud Talk (spreed) 21, only what the app uses.
 */

namespace OCA\Talk\Service;

use OCA\Talk\Exceptions\ParticipantNotFoundException;
use OCA\Talk\Participant;
use OCA\Talk\Room;

/** Test double: user counts by room token. */
class ParticipantService {
	/** @param array<string, int> $userCounts by token */
	public function __construct(
		private array $userCounts = [],
	) {
	}

	/**
	 * Test helper: participants and their effective permissions (Participant::getPermissions).
	 *
	 * @var array<string, array<string, int>> token => user id => permissions
	 */
	public array $permissions = [];

	/** @throws ParticipantNotFoundException */
	public function getParticipant(Room $room, ?string $userId, $sessionId = null): Participant {
		if ($userId === null || !isset($this->permissions[$room->getToken()][$userId])) {
			throw new ParticipantNotFoundException('User is not a participant');
		}
		return new Participant($this->permissions[$room->getToken()][$userId]);
	}

	public function getNumberOfUsers(Room $room): int {
		return $this->userCounts[$room->getToken()] ?? 0;
	}
}
