<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud Talk (spreed) 21, only what the app uses.
 */

namespace OCA\Talk;

use OCA\Talk\Exceptions\RoomNotFoundException;

/** Test double of Talk's room manager: knows the rooms it was given. */
class Manager {
	/** @param array<string, Room> $rooms by token */
	public function __construct(
		private array $rooms = [],
	) {
	}

	/** Test helper: Talk made a conversation. */
	public function addRoom(Room $room): void {
		$this->rooms[$room->getToken()] = $room;
	}

	/** Test helper: the conversation was deleted. */
	public function removeRoom(string $token): void {
		unset($this->rooms[$token]);
	}

	/**
	 * Test helper: who is in which conversation (the real Manager asks the attendees table).
	 *
	 * @var array<string, list<string>> token => user ids
	 */
	public array $members = [];

	/** @return list<Room> the conversations $userId is a participant of */
	public function getRoomsForUser(string $userId, array $sessionIds = [], bool $includeLastMessage = false): array {
		$out = [];
		foreach ($this->rooms as $token => $room) {
			if (in_array($userId, $this->members[$token] ?? [], true)) {
				$out[] = $room;
			}
		}
		return $out;
	}

	/** @throws RoomNotFoundException */
	public function getRoomByToken(string $token, ?string $preloadUserId = null, ?string $serverUrl = null): Room {
		if (!isset($this->rooms[$token])) {
			throw new RoomNotFoundException();
		}
		return $this->rooms[$token];
	}
}
