<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud Talk (spreed) 21, only what the app uses.
 */

namespace OCA\Talk\Events;

use OCA\Talk\Model\BotServer;
use OCA\Talk\Room;
use OCP\EventDispatcher\Event;

class BotEnabledEvent extends Event {
	public function __construct(
		private Room $room,
		private BotServer $botServer,
	) {
	}

	public function getRoom(): Room {
		return $this->room;
	}

	public function getBotServer(): BotServer {
		return $this->botServer;
	}
}
